//! Aligned text tables for people: a header row and rows of cells, each column as wide as its
//! widest cell (long cells cut short with `…`).

use std::fmt::Write as _;

/// The widest a cell is shown, in characters.
const MAX_CELL: usize = 72;

/// A table being built.
pub struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
    pub fn new(header: &[&'static str]) -> Self {
        Self {
            header: header.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells are empty, extra ones dropped).
    pub fn row(&mut self, cells: Vec<String>) {
        let mut cells: Vec<String> = cells.into_iter().map(|c| cell(&c)).collect();
        cells.resize(self.header.len(), String::new());
        self.rows.push(cells);
    }

    /// The table as text: the header, then the rows, columns separated by two spaces, no
    /// trailing spaces.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut out = String::new();
        let header: Vec<String> = self.header.iter().map(|h| h.to_string()).collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (i, (c, &w)) in row.iter().zip(&widths).enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                let _ = write!(line, "{c:<w$}");
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// A cell's text on one line, cut to [`MAX_CELL`] characters.
fn cell(text: &str) -> String {
    let one_line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one_line.chars().count() <= MAX_CELL {
        return one_line;
    }
    let mut cut: String = one_line.chars().take(MAX_CELL - 1).collect();
    cut.push('…');
    cut
}

/// Key/value lines (`key:  value`), keys aligned.
pub fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    let mut out = String::new();
    for (k, v) in pairs {
        let key = format!("{k}:");
        let _ = writeln!(out, "{key:<width$}  {v}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_to_the_widest_cell_and_long_cells_are_cut() {
        let mut t = Table::new(&["ID", "STATUS"]);
        t.row(vec!["a".into(), "running".into()]);
        t.row(vec!["long-id".into(), "x\ny".into()]);
        assert_eq!(
            t.render(),
            "ID       STATUS\na        running\nlong-id  x y\n"
        );
        let mut t = Table::new(&["A"]);
        t.row(vec!["é".repeat(100)]);
        let line = t.render().lines().nth(1).unwrap_or_default().to_string();
        assert_eq!(line.chars().count(), MAX_CELL);
        assert!(line.ends_with('…'));
    }

    #[test]
    fn fields_align_keys() {
        assert_eq!(
            fields(&[("run", "r".into()), ("status", "ok".into())]),
            "run:     r\nstatus:  ok\n"
        );
    }
}
