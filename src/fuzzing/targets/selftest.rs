//! `selftest`: a target with planted bugs, for the engine's own tests (not in
//! [`super::all`]): `BUG…` panics, `DEEP…` overflows the stack, `QUAD…` is quadratic in its
//! length.

use crate::fuzzing::engine::{Probe, Target};

/// The target.
pub const TARGET: Target = Target {
    name: "selftest",
    about: "planted bugs for the engine's tests",
    run,
    max_len: 64,
    scale: crate::fuzzing::engine::repeat_bytes,
    probes,
    seeds: Vec::new,
};

#[inline(never)]
fn recurse(n: u64) -> u64 {
    let pad = std::hint::black_box([n; 64]);
    if std::hint::black_box(n) == u64::MAX {
        return pad[0];
    }
    recurse(n + 1).wrapping_add(pad[3])
}

fn run(data: &[u8]) {
    if data.starts_with(b"BUG") {
        panic!("planted bug");
    }
    if data.starts_with(b"DEEP") {
        std::hint::black_box(recurse(0));
    }
    if data.starts_with(b"QUAD") {
        let mut x = 0u64;
        for i in 0..data.len() {
            for j in 0..data.len() {
                x = x.wrapping_add(std::hint::black_box((i ^ j) as u64));
            }
        }
        std::hint::black_box(x);
    }
}

fn quadratic(n: usize) -> Vec<u8> {
    let mut v = b"QUAD".to_vec();
    v.resize(n, b'.');
    v
}

fn probes() -> Vec<Probe> {
    vec![Probe {
        name: "quadratic",
        make: quadratic,
        n: 3000,
        open: false,
    }]
}
