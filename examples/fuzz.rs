//! Runs the fuzz targets for longer than the test suite does (see the README's "Fuzzing").
//!
//! ```sh
//! cargo run --release --example fuzz -- --list
//! cargo run --release --example fuzz -- --target ingest --seconds 300
//! cargo run --release --example fuzz -- --seconds 60            # every target, one after another
//! cargo run --release --example fuzz -- --write-seeds           # (re)write the hand-made seeds
//! ```
//!
//! Options: `--target NAME` (repeatable; default all), `--seconds N` per target (default 60),
//! `--seed N` (default: the time), `--open` (also replay `open/` and run open size probes),
//! `--save-new N` (write up to N inputs reaching new features to `fuzz/corpus/<target>/`,
//! default 20), `--no-time-check`, `--write-seeds`, `--list`. Exits 1 when something was found
//! that is not known open.

use std::process::Command;

use stepline::fuzzing::engine::{self, fuzz_root, supervise, Options};

fn usage() -> ! {
    eprintln!(
        "usage: fuzz [--list] [--write-seeds] [--target NAME]... [--seconds N] [--seed N] \
         [--open] [--save-new N] [--no-time-check]"
    );
    std::process::exit(2);
}

fn main() {
    if engine::child_main() {
        return;
    }
    let mut targets: Vec<String> = Vec::new();
    let mut seconds = 60.0;
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut open = false;
    let mut save_new = 20;
    let mut time_check = true;
    let mut write_seeds = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage());
        match arg.as_str() {
            "--target" => targets.push(value()),
            "--seconds" => seconds = value().parse().unwrap_or_else(|_| usage()),
            "--seed" => seed = value().parse().unwrap_or_else(|_| usage()),
            "--save-new" => save_new = value().parse().unwrap_or_else(|_| usage()),
            "--open" => open = true,
            "--no-time-check" => time_check = false,
            "--write-seeds" => write_seeds = true,
            "--list" => {
                for t in stepline::fuzzing::all_targets() {
                    println!("{:20} {}", t.name, t.about);
                }
                return;
            }
            _ => usage(),
        }
    }
    let all = stepline::fuzzing::all_targets();
    let chosen: Vec<_> = if targets.is_empty() {
        all
    } else {
        targets
            .iter()
            .map(|n| {
                stepline::fuzzing::target(n).unwrap_or_else(|| {
                    eprintln!("no target {n:?}; --list shows them");
                    std::process::exit(2)
                })
            })
            .collect()
    };
    let root = fuzz_root();
    if write_seeds {
        for t in &chosen {
            match engine::write_seeds(&root, t) {
                Ok(n) => println!("{}: {n} new seed files", t.name),
                Err(e) => {
                    eprintln!("{}: cannot write seeds: {e}", t.name);
                    std::process::exit(1);
                }
            }
        }
        return;
    }
    println!(
        "seed {seed}, {seconds}s per target, root {}",
        root.display()
    );
    let exe = std::env::current_exe().unwrap_or_else(|_| "fuzz".into());
    let command = move || Command::new(&exe);
    let mut problems = Vec::new();
    for t in &chosen {
        let options = Options {
            root: root.clone(),
            seconds,
            seed,
            open,
            time_check,
            save_new,
            skip: Vec::new(),
        };
        let report = supervise(t, &options, &command);
        print!("{}", report.summary());
        problems.extend(report.problems());
    }
    if !problems.is_empty() {
        println!("found:\n{}", problems.join("\n"));
        std::process::exit(1);
    }
}
