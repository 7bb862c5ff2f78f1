//! A vault behind five gates, each opened by one 1-in-8 random draw, and
//! around it one use of every assertion kind of the official Antithesis Rust
//! SDK. Explored by hvsim, every property gets its verdict, and the vault
//! opening ("the vault stays closed" failing) is the bug to find.

use std::time::Duration;

use antithesis_sdk::prelude::*;
use antithesis_sdk::{lifecycle, random};
use serde_json::json;

fn main() {
    antithesis_init();
    // Opaque to the compiler, so the assertions below are really evaluated.
    let x: u64 = std::hint::black_box(5);
    assert_always!(x >= 5, "always: x is at least 5", &json!({ "x": x }));
    assert_always_or_unreachable!(x < 7, "always or unreachable: x stays below 7");
    assert_sometimes!(x == 5, "sometimes: x is 5");
    assert_reachable!("reachable: the program starts");
    if x > 1000 {
        assert_unreachable!("unreachable: x is never huge", &json!({ "x": x }));
    }
    assert_always_greater_than!(x, 1, "numeric: x stays above 1");
    assert_always_greater_than_or_equal_to!(x, 5, "numeric: x at least 5");
    assert_always_less_than!(x, 100, "numeric: x below 100");
    assert_always_less_than_or_equal_to!(x, 6, "numeric: x at most 6");
    assert_sometimes_greater_than!(x, 4, "numeric: x sometimes above 4");
    assert_sometimes_greater_than_or_equal_to!(x, 5, "numeric: x sometimes at least 5");
    assert_sometimes_less_than!(x, 6, "numeric: x sometimes below 6");
    assert_sometimes_less_than_or_equal_to!(x, 5, "numeric: x sometimes at most 5");
    assert_always_some!({ small: x < 10, odd: x % 2 == 1 }, "boolean: x is small or odd");
    assert_sometimes_all!({ small: x < 10, positive: x > 0 }, "boolean: x small and positive");
    lifecycle::send_event("vault_started", &json!({ "gates": 5 }));
    lifecycle::setup_complete(&json!({ "program": "antithesis-vault" }));

    // Five chained 1-in-8 draws, each opening on a different option, two
    // of them through random_choice: the bug is 1 in 32768 per attempt.
    let eight: Vec<u64> = (0..8).collect();
    loop {
        // Each attempt takes virtual time, so every slice makes a few.
        std::thread::sleep(Duration::from_millis(100));
        let gate1 = random::get_random() % 8 == 3;
        assert_sometimes!(gate1, "gate 1 opens");
        if !gate1 {
            continue;
        }
        let gate2 = random::random_choice(&eight) == Some(&5);
        assert_sometimes!(gate2, "gate 2 opens");
        if !gate2 {
            continue;
        }
        let gate3 = random::get_random() % 8 == 6;
        assert_sometimes!(gate3, "gate 3 opens");
        if !gate3 {
            continue;
        }
        let gate4 = random::random_choice(&eight) == Some(&1);
        assert_sometimes!(gate4, "gate 4 opens");
        if !gate4 {
            continue;
        }
        let gate5 = random::get_random() % 8 == 4;
        assert_sometimes!(gate5, "gate 5 opens");
        if gate5 {
            assert_always!(false, "the vault stays closed", &json!({ "gates": 5 }));
        }
    }
}
