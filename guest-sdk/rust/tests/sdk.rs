//! The Rust SDK outside hvsim: JSON lines to a local file.

use serde_json::Value;

fn lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn never_called() {
    hvsim_sdk::assert_unreachable!("sdk test: never reached");
}

#[test]
fn writes_antithesis_shaped_lines_and_registers_every_site() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sdk.jsonl");
    hvsim_sdk::set_output(&out).unwrap();
    hvsim_sdk::init();
    hvsim_sdk::setup_complete(&serde_json::json!({"nodes": 3}));
    hvsim_sdk::assert_always!(1 + 1 == 2, "sdk test: arithmetic");
    hvsim_sdk::assert_sometimes!(false, "sdk test: sometimes", &serde_json::json!({"why": "testing"}));
    hvsim_sdk::assert_always_greater_than!(3, 5, "sdk test: three above five");
    hvsim_sdk::assert_sometimes_all!(&[("a", true), ("b", false)], "sdk test: all");
    hvsim_sdk::stop_faults(2.5);
    hvsim_sdk::send_event("sdk_test_event", &serde_json::json!({"n": 1}));
    if std::env::var_os("NEVER_SET_IN_TESTS").is_some() {
        never_called();
    }
    let v = lines(&out);
    assert_eq!(v[0]["antithesis_sdk"]["language"]["name"], "Rust");
    // Registrations come first, one per site, including the unreached one.
    let regs: Vec<&Value> = v.iter().filter(|l| l["antithesis_assert"]["hit"] == false).collect();
    assert!(regs.iter().any(|r| r["antithesis_assert"]["message"] == "sdk test: never reached"));
    assert!(regs.iter().any(|r| r["antithesis_assert"]["display_type"] == "SometimesAll"));
    assert!(v.iter().any(|l| l["antithesis_setup"]["status"] == "complete"));
    let hit = |msg: &str| -> Value {
        v.iter().find(|l| l["antithesis_assert"]["message"] == msg && l["antithesis_assert"]["hit"] == true).unwrap()
            ["antithesis_assert"]
            .clone()
    };
    let a = hit("sdk test: arithmetic");
    assert_eq!(
        (a["condition"].as_bool(), a["display_type"].as_str(), a["assert_type"].as_str()),
        (Some(true), Some("Always"), Some("always"))
    );
    assert!(a["location"]["file"].as_str().unwrap().ends_with("sdk.rs"));
    assert!(a["location"]["begin_line"].as_u64().unwrap() > 0);
    assert_eq!(hit("sdk test: sometimes")["details"]["why"], "testing");
    let n = hit("sdk test: three above five");
    assert_eq!((n["condition"].as_bool(), n["details"]["left"].as_f64()), (Some(false), Some(3.0)));
    assert!(v.iter().any(|l| l["antithesis_guidance"]["guidance_type"] == "numeric"));
    assert_eq!(hit("sdk test: all")["condition"], false);
    assert_eq!(v[v.len() - 2], serde_json::json!({"hvsim_faults": {"pause": 2.5}}));
    assert_eq!(v.last().unwrap()["sdk_test_event"]["n"], 1);
    assert!(hvsim_sdk::random_choice(&[1, 2, 3]).is_some());
    assert!(hvsim_sdk::random_choice::<u8>(&[]).is_none());
}
