//! A family of small programs on the official Antithesis Rust SDK, each
//! hiding one bug behind random draws, written to differ in the ways real
//! workloads differ: how progress is lost on a wrong draw, how draws are
//! made (`get_random`, `random_choice`), whether each step says it got
//! somewhere (a boolean `sometimes`) or only how far (numeric guidance),
//! how many processes draw, how far apart in time the draws are, and
//! whether a draw picks a fault-injection site. `hvsim bench explore
//! --family` explores each to its bug (docs/exploration.md#the-family).
//!
//! `antithesis-family PROGRAM` runs one; `antithesis-family list` prints
//! a line for each: its name, one in how many attempts finds its bug, the
//! timelines a search that tries each draw's values in order, one value
//! per timeline, needs at least (the sum of each right value's place), the
//! virtual time a timeline of it runs, and its draws (`right/options`).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use antithesis_sdk::prelude::*;
use antithesis_sdk::{lifecycle, random};
use serde_json::json;

/// A program of the family: its name, its draws (options, the value that
/// leads on) and how it runs.
struct Program {
    name: &'static str,
    /// Each draw on the way to the bug: (options, the right value). A draw
    /// of `options` options is the SDK's value modulo `options`, so trying
    /// the values 0, 1, ... finds the right one at try `right + 1`.
    draws: &'static [(u64, u64)],
    /// The bug's chance per attempt is one in this.
    one_in: f64,
    /// Virtual time a timeline of it runs (the bench's `--slice`): 500 ms,
    /// or enough for one of its stages where they are seconds apart.
    slice_ms: u64,
    run: fn(),
}

/// Chances per attempt: a chain's, and a buggify site's, is the product of
/// its draws'; a retried
/// step of four tries passes with 1 - (15/16)^4; the table's largest sum is
/// one draw in 1,000 and the larger of two draws of e's digits is 8 with
/// 1 - 0.6^2; each of the two processes' chains is one in 216 (both must
/// finish).
const PROGRAMS: &[Program] = &[
    Program { name: "chain-reset", draws: &[(8, 3), (8, 5), (8, 6), (8, 1), (8, 4)], one_in: 32768.0, slice_ms: 500, run: chain_reset },
    Program { name: "retry-same-state", draws: &[(16, 9), (16, 2), (16, 14), (16, 7)], one_in: 373.0, slice_ms: 500, run: retry_same_state },
    Program { name: "choice-sizes", draws: &[(2, 1), (5, 3), (13, 11), (3, 0), (7, 6)], one_in: 2730.0, slice_ms: 500, run: choice_sizes },
    Program { name: "table-sum", draws: &[(10, 5), (10, 5), (10, 5), (10, 3)], one_in: 1562.5, slice_ms: 500, run: table_sum },
    Program { name: "numeric-chain", draws: &[(6, 2), (6, 4), (6, 0), (6, 5), (6, 1)], one_in: 7776.0, slice_ms: 500, run: numeric_chain },
    Program { name: "two-processes", draws: &[(6, 1), (6, 4), (6, 2), (6, 5), (6, 0), (6, 3)], one_in: 216.0, slice_ms: 500, run: two_processes },
    Program { name: "slow-stages", draws: &[(8, 7), (8, 2), (8, 5)], one_in: 512.0, slice_ms: 2500, run: slow_stages },
    Program { name: "buggify-site", draws: &[(16, 13), (8, 5)], one_in: 128.0, slice_ms: 500, run: buggify_site },
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("list") => {
            for p in PROGRAMS {
                let in_order: u64 = p.draws.iter().map(|&(_, right)| right + 1).sum();
                let draws: Vec<String> = p.draws.iter().map(|&(n, r)| format!("{r}/{n}")).collect();
                println!("{} {} {in_order} {} {}", p.name, p.one_in, p.slice_ms, draws.join(","));
            }
        }
        // The processes some programs start.
        Some("child") => chain_child(&args[2], &args[3..]),
        Some("noise") => noise(),
        Some(name) => match PROGRAMS.iter().find(|p| p.name == name) {
            Some(p) => {
                antithesis_init();
                lifecycle::setup_complete(&json!({ "program": p.name }));
                (p.run)()
            }
            None => usage(),
        },
        None => usage(),
    }
}

fn usage() {
    let names: Vec<&str> = PROGRAMS.iter().map(|p| p.name).collect();
    eprintln!("usage: antithesis-family list | {}", names.join(" | "));
    std::process::exit(2);
}

fn right(name: &str, i: usize) -> u64 {
    PROGRAMS.iter().find(|p| p.name == name).expect("a program of the family").draws[i].1
}

fn pause(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

/// Five chained 1-in-8 draws; a wrong one sends progress back to zero and
/// the program draws again after a short sleep. Every step says how far
/// each stage got (each stage's `sometimes` is evaluated at every step,
/// false until it is reached); the bug is the last stage reached.
fn chain_reset() {
    let mut stage = 0u64;
    loop {
        pause(10);
        if random::get_random() % 8 == right("chain-reset", stage as usize) {
            stage += 1;
        } else {
            stage = 0;
        }
        // Messages are the SDK's constants: one assertion per stage.
        assert_sometimes!(stage >= 1, "stage 1 reached");
        assert_sometimes!(stage >= 2, "stage 2 reached");
        assert_sometimes!(stage >= 3, "stage 3 reached");
        assert_sometimes!(stage >= 4, "stage 4 reached");
        assert_always_less_than!(stage, 5, "the chain never reaches its end", &json!({ "stage": stage }));
        if stage == 5 {
            stage = 0;
        }
    }
}

/// A request retried: each of four 1-in-16 draws is retried in the same
/// state up to three times, and then the whole sequence starts over.
fn retry_same_state() {
    loop {
        pause(50);
        let mut stage = 0;
        let mut retries = 0;
        while stage < 4 && retries <= 3 {
            pause(5);
            if random::get_random() % 16 == right("retry-same-state", stage) {
                stage += 1;
                retries = 0;
                assert_sometimes!(true, "a step succeeds");
            } else {
                retries += 1;
            }
        }
        assert_sometimes!(stage >= 2, "half the steps succeed");
        assert_always!(stage < 4, "the sequence never completes", &json!({ "stage": stage }));
    }
}

/// `random_choice` over lists of 2, 5, 13, 3 and 7 options, in a chain
/// that starts over on a wrong choice; a `sometimes` right after each.
fn choice_sizes() {
    let lists: Vec<Vec<u64>> = [2u64, 5, 13, 3, 7].iter().map(|&n| (0..n).collect()).collect();
    let choose = |i: usize| *random::random_choice(&lists[i]).expect("a list of options") == right("choice-sizes", i);
    loop {
        pause(20);
        let ok = choose(0);
        assert_sometimes!(ok, "choice 1 right");
        if !ok {
            continue;
        }
        let ok = choose(1);
        assert_sometimes!(ok, "choice 2 right");
        if !ok {
            continue;
        }
        let ok = choose(2);
        assert_sometimes!(ok, "choice 3 right");
        if !ok {
            continue;
        }
        let ok = choose(3);
        assert_sometimes!(ok, "choice 4 right");
        if !ok {
            continue;
        }
        let ok = choose(4);
        assert_sometimes!(ok, "choice 5 right");
        if ok {
            assert_unreachable!("every choice right", &json!({ "lists": 5 }));
        }
    }
}

/// Draws index tables and combine: the sum of three draws from one table
/// (the digits of pi) and the larger of two from another (of e). The bug
/// is the largest sum with the largest max; numeric guidance on the sum
/// so far says how close an attempt came, and nothing else does.
fn table_sum() {
    const PI: [u64; 10] = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3];
    const E: [u64; 10] = [2, 7, 1, 8, 2, 8, 1, 8, 2, 8];
    loop {
        pause(20);
        let mut sum = 0;
        for _ in 0..3 {
            sum += PI[(random::get_random() % 10) as usize];
            assert_sometimes_greater_than!(sum, 20, "the sum gets past 20", &json!({ "sum": sum }));
        }
        let max = E[(random::get_random() % 10) as usize].max(E[(random::get_random() % 10) as usize]);
        assert_always!(!(sum == 27 && max == 8), "no attempt draws the largest of both", &json!({ "sum": sum }));
    }
}

/// Five chained 1-in-6 draws that start over when wrong, watched only by
/// numeric guidance: an always-less-than on the progress (the bug) and a
/// sometimes-greater-than, no boolean `sometimes` per stage.
fn numeric_chain() {
    let mut progress = 0u64;
    loop {
        pause(10);
        if random::get_random() % 6 == right("numeric-chain", progress as usize) {
            progress += 1;
        } else {
            progress = 0;
        }
        assert_sometimes_greater_than!(progress, 3, "progress passes 3", &json!({ "progress": progress }));
        assert_always_less_than!(progress, 5, "progress stays below 5", &json!({ "progress": progress }));
        if progress == 5 {
            progress = 0;
        }
    }
}

/// Two processes, each climbing a chain of three 1-in-6 draws that starts
/// over when wrong, their draws interleaved; the bug is both finishing.
fn two_processes() {
    let _ = std::fs::remove_file("/tmp/family-a");
    let _ = std::fs::remove_file("/tmp/family-b");
    let me = std::env::current_exe().expect("its own path");
    let _a = Command::new(&me).args(["child", "a", "0", "1", "2"]).spawn().expect("a child");
    let _b = Command::new(&me).args(["child", "b", "3", "4", "5"]).spawn().expect("a child");
    loop {
        pause(20);
        let (a, b) = (Path::new("/tmp/family-a").exists(), Path::new("/tmp/family-b").exists());
        assert_sometimes!(a || b, "one chain finishes");
        assert_always!(!(a && b), "the two chains never both finish", &json!({ "a": a, "b": b }));
    }
}

/// One chain of [`two_processes`]: `draws` are the indices of its draws in
/// the program's list; done, it leaves `/tmp/family-NAME`.
fn chain_child(name: &str, draws: &[String]) {
    antithesis_init();
    let draws: Vec<usize> = draws.iter().map(|d| d.parse().expect("a draw index")).collect();
    let mut stage = 0;
    while stage < draws.len() {
        pause(15);
        if random::get_random() % 6 == right("two-processes", draws[stage]) {
            stage += 1;
            assert_sometimes!(true, "a chain moves on");
        } else {
            stage = 0;
        }
    }
    std::fs::write(format!("/tmp/family-{name}"), b"done").expect("/tmp is writable");
    loop {
        pause(1000);
    }
}

/// Three 1-in-8 draws seconds apart, while another process draws every
/// 50 ms; a wrong draw starts over.
fn slow_stages() {
    let me = std::env::current_exe().expect("its own path");
    let _noise = Command::new(me).arg("noise").spawn().expect("a child");
    let stage = |i: usize| {
        pause(2000);
        random::get_random() % 8 == right("slow-stages", i)
    };
    loop {
        let ok = stage(0);
        assert_sometimes!(ok, "slow stage 1");
        if !ok {
            continue;
        }
        let ok = stage(1);
        assert_sometimes!(ok, "slow stage 2");
        if !ok {
            continue;
        }
        let ok = stage(2);
        assert_sometimes!(ok, "slow stage 3");
        if ok {
            assert_unreachable!("three slow stages pass");
        }
    }
}

/// Another process's draws, every 50 ms, used for nothing.
fn noise() {
    antithesis_init();
    loop {
        pause(50);
        std::hint::black_box(random::get_random());
    }
}

/// FoundationDB's buggify, written by hand: a draw picks which of sixteen
/// fault sites is on for an attempt, and a site that is on fires one time
/// in eight. Site 13's fault breaks a transfer between two accounts.
fn buggify_site() {
    loop {
        pause(100);
        let site = random::get_random() % 16;
        let mut accounts = [100i64, 100];
        for k in 0..16 {
            let fires = site == k && random::get_random() % 8 == 5;
            assert_sometimes!(fires, "a buggified site fires");
            match k {
                13 => {
                    accounts[0] -= 10;
                    // The fault: the credit is lost.
                    if !fires {
                        accounts[1] += 10;
                    }
                }
                // The other sites' faults delay, retry, or repeat
                // idempotent work: harmless.
                _ if fires => pause(1),
                _ => {}
            }
        }
        assert_always!(accounts[0] + accounts[1] == 200, "transfers conserve money", &json!({ "accounts": accounts }));
    }
}
