//! The turns of a provider that wants alternating roles and a user turn first (Anthropic
//! Messages, Gemini `contents`), written in place ([`super::writer`]): a block of the same role
//! as the open turn joins it (consecutive same-role turns merge), and a tool result goes before
//! the turn's other blocks.

use super::writer::{Commas, Key, Obj};
use crate::key;

/// The turn being written: its list of blocks is open.
struct OpenTurn {
    role: &'static str,
    /// The commas between its blocks.
    blocks: Commas,
    /// Where its first block that is not a tool result starts, once one is written: a tool
    /// result that comes later (a merged turn) is put there, before the others.
    rest_at: Option<usize>,
}

/// Writes an array of turns `{"role": …, <blocks key>: [...]}` one block at a time.
pub struct TurnWriter<'b, const N: usize> {
    buf: &'b mut Vec<u8>,
    /// The key of a turn's list of blocks (`content`, `parts`).
    blocks_key: Key<N>,
    /// The role of the model's turns, which may not come first.
    model_role: &'static str,
    /// The user turn written first when the history starts with a model turn, as JSON.
    filler: &'static [u8],
    /// The commas between turns.
    turns: Commas,
    open: Option<OpenTurn>,
    /// True once the filler turn was written.
    filled: bool,
}

impl<'b, const N: usize> TurnWriter<'b, N> {
    /// Opens the array at the end of `buf`; `filler` is written first if the first turn would
    /// be of `model_role`.
    pub fn open(
        buf: &'b mut Vec<u8>,
        blocks_key: Key<N>,
        model_role: &'static str,
        filler: &'static [u8],
    ) -> Self {
        buf.push(b'[');
        Self {
            buf,
            blocks_key,
            model_role,
            filler,
            turns: Commas::default(),
            open: None,
            filled: false,
        }
    }

    /// True once a turn was opened.
    pub fn started(&self) -> bool {
        self.open.is_some()
    }

    /// Writes a block in a turn of `role` (`write` writes it to the buffer it is given);
    /// `result` says it is a tool result, which goes before the turn's other blocks.
    pub fn block(&mut self, role: &'static str, result: bool, write: impl FnOnce(&mut Vec<u8>)) {
        let turn = match &mut self.open {
            Some(turn) if turn.role == role => turn,
            _ => {
                let turn = self.open_turn(role);
                self.open.insert(turn)
            }
        };
        let buf = &mut *self.buf;
        match (result, turn.rest_at) {
            (true, Some(at)) => {
                // Rare: a result after other blocks of the turn goes before them (only the
                // open turn's blocks follow `at`, so little is moved).
                let mut block = Vec::with_capacity(128);
                write(&mut block);
                block.push(b',');
                let len = block.len();
                buf.splice(at..at, block);
                turn.rest_at = Some(at + len);
            }
            (_, rest_at) => {
                turn.blocks.next(buf);
                if !result && rest_at.is_none() {
                    turn.rest_at = Some(buf.len());
                }
                write(buf);
            }
        }
    }

    /// Closes the open turn, if any, and opens one of `role` (after the filler turn when the
    /// history would start with a model turn).
    fn open_turn(&mut self, role: &'static str) -> OpenTurn {
        if self.open.is_some() {
            self.buf.extend_from_slice(b"]}");
        } else if role == self.model_role {
            self.turns.next(self.buf);
            self.buf.extend_from_slice(self.filler);
            self.filled = true;
        }
        self.turns.next(self.buf);
        let mut m = Obj::open(self.buf);
        m.str(key!("role"), role);
        m.key(self.blocks_key).push(b'[');
        OpenTurn {
            role,
            blocks: Commas::default(),
            rest_at: None,
        }
    }

    /// Closes the open turn, if any, and the array; true when the filler turn was written.
    pub fn finish(mut self) -> bool {
        if self.open.take().is_some() {
            self.buf.extend_from_slice(b"]}");
        }
        self.buf.push(b']');
        self.filled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn same_role_blocks_merge_results_go_first_and_a_model_start_gets_the_filler() {
        let mut buf = Vec::new();
        let mut turns = TurnWriter::open(
            &mut buf,
            key!("parts"),
            "model",
            br#"{"role":"user","parts":[]}"#,
        );
        assert!(!turns.started());
        turns.block("model", false, |b| b.extend_from_slice(b"1"));
        assert!(turns.started());
        turns.block("user", false, |b| b.extend_from_slice(b"2"));
        turns.block("user", true, |b| b.extend_from_slice(b"3"));
        turns.block("user", true, |b| b.extend_from_slice(b"4"));
        turns.block("user", false, |b| b.extend_from_slice(b"5"));
        turns.block("model", true, |b| b.extend_from_slice(b"6"));
        assert!(turns.finish());
        let parsed: Value = serde_json::from_slice(&buf).unwrap();
        assert_eq!(
            parsed,
            json!([
                {"role": "user", "parts": []},
                {"role": "model", "parts": [1]},
                {"role": "user", "parts": [3, 4, 2, 5]},
                {"role": "model", "parts": [6]},
            ])
        );

        let mut buf = Vec::new();
        let turns = TurnWriter::open(&mut buf, key!("content"), "assistant", b"{}");
        assert!(!turns.finish());
        assert_eq!(buf, b"[]");
    }
}
