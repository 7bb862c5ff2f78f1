//! `hvsim bench net`: packets per second between two nodes through the
//! simulated switch, against the same TCP exchange over loopback inside one
//! node (with the loopback MTU lowered to Ethernet's, so both carry the same
//! packets), in one boot of the Linux guest.
//!
//! The guest marks each phase on the SDK channel; the host takes wall time
//! at each mark. Starting the processes of an exchange costs seconds of
//! emulated kernel time on a nested host, so every phase is also run with
//! zero bytes, and packet rates are marginal: (packets - packets of the
//! empty exchange) / (wall - wall of the empty exchange).

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;

use super::print_report;
use anyhow::{bail, Context, Result};
use hvsim_guest_image::host::Host;
use hvsim_guest_image::target::{StartOptions, System, Target};
use hvsim_vmm::{End, Stop, Vtime};

/// The guest's side: one TCP exchange per phase, server on node 0.
fn script(bytes: u64) -> String {
    format!(
        r#"
hvsim-node 0 ip link set lo mtu 1500
lo() {{ echo "bench lo $1 $(hvsim-node 0 awk '/lo:/ {{ sub(/.*lo:/, ""); print $2 }}' /proc/net/dev)" > $HVSIM_SDK_OUTPUT; }}
phase() {{
  hvsim-node 0 nc -l -p $2 -e sh -c 'wc -c > /dev/null' & server=$!
  sleep 0.01
  lo $1-before
  echo "bench start $1" > $HVSIM_SDK_OUTPUT
  head -c $5 /dev/zero | hvsim-node $4 nc $3 $2
  wait $server
  echo "bench end $1" > $HVSIM_SDK_OUTPUT
  lo $1-after
}}
phase empty-loopback 5001 127.0.0.1 0 0
phase loopback 5002 127.0.0.1 0 {bytes}
phase empty-switch 5003 10.0.0.1 1 0
phase switch 5004 10.0.0.1 1 {bytes}
"#
    )
}

#[derive(Default, Debug)]
struct Phase {
    wall_s: f64,
    /// Wall time in the VMM (outside KVM_RUN).
    vmm_s: f64,
    vtime_ns: u64,
    switch_frames: u64,
    lo_packets: u64,
}

pub fn bench_net(bytes: u64, json: bool) -> Result<ExitCode> {
    let host = Host::open()?;
    let target = Target::Linux {
        command: script(bytes),
        mem: 128 << 20,
        files: Vec::new(),
        system: System { nodes: 2, disk_bytes: 16 << 20, ..System::default() },
        verbose_boot: false,
    };
    let mut m = target.start(0, &host, &StartOptions::default()).context("cannot start the guest")?.machine;
    m.set_stop_on_message(true);
    m.enable_wall_profile(0);
    hvsim_guest_image::note!(
        "hvsim: bench net: booting two nodes and exchanging {bytes} bytes four ways (a few minutes here)"
    );

    // Per mark: wall clock, virtual time, frames through the switch, wall
    // time spent inside KVM_RUN so far.
    let mut marks: BTreeMap<String, (Instant, u64, u64, f64)> = BTreeMap::new();
    let mut lo: BTreeMap<String, u64> = BTreeMap::new();
    loop {
        match m.run_until(Vtime::MAX)? {
            Stop::Message => {
                for msg in m.take_messages() {
                    let text = String::from_utf8_lossy(&msg.bytes).trim().to_owned();
                    let words: Vec<&str> = text.split_whitespace().collect();
                    let frames = m.state().devices.virtio.switch.frames_delivered;
                    let in_guest = m.wall_profile().map_or(0.0, |p| p.in_guest.as_secs_f64());
                    match words.as_slice() {
                        ["bench", "start" | "end", name] => {
                            marks.insert(
                                format!("{}-{name}", words[1]),
                                (Instant::now(), msg.vtime.nanos(), frames, in_guest),
                            );
                        }
                        ["bench", "lo", name, n] => {
                            lo.insert(
                                (*name).to_owned(),
                                n.parse().with_context(|| format!("bad lo counter in {text:?}"))?,
                            );
                        }
                        _ => {}
                    }
                }
            }
            Stop::Ended(End::Exit { status: 0 }) => break,
            Stop::Ended(end) => bail!(
                "the benchmark guest ended with {}: {}",
                end.detail(),
                String::from_utf8_lossy(&m.console()).lines().rev().take(10).collect::<Vec<_>>().join(" | ")
            ),
            Stop::Deadline => unreachable!("no deadline was set"),
        }
    }
    let phase = |name: &str| -> Result<Phase> {
        let get = |k: String| marks.get(&k).copied().with_context(|| format!("the guest never sent mark {k}"));
        let (s, e) = (get(format!("start-{name}"))?, get(format!("end-{name}"))?);
        let count = |k: &str| lo.get(&format!("{name}-{k}")).copied().unwrap_or(0);
        Ok(Phase {
            wall_s: (e.0 - s.0).as_secs_f64(),
            vmm_s: (e.0 - s.0).as_secs_f64() - (e.3 - s.3),
            vtime_ns: e.1 - s.1,
            switch_frames: e.2 - s.2,
            lo_packets: count("after").saturating_sub(count("before")),
        })
    };
    let (el, l, es, s) = (phase("empty-loopback")?, phase("loopback")?, phase("empty-switch")?, phase("switch")?);
    // Marginal rate: the empty exchange's packets and wall time taken out.
    // When process start-up noise swamps the difference (too few bytes),
    // fall back to the gross rate and say so.
    let rate = |p: u64, ep: u64, wall: f64, ewall: f64| -> (f64, bool) {
        let dt = wall - ewall;
        if dt > 0.2 * wall && p > ep {
            ((p - ep) as f64 / dt, true)
        } else {
            (p as f64 / wall.max(1e-3), false)
        }
    };
    let (lo_pps, lo_marginal) = rate(l.lo_packets, el.lo_packets, l.wall_s, el.wall_s);
    let (switch_pps, switch_marginal) = rate(s.switch_frames, es.switch_frames, s.wall_s, es.wall_s);
    let marginal = lo_marginal && switch_marginal;
    let (lo_pps, switch_pps) = if marginal {
        (lo_pps, switch_pps)
    } else {
        (l.lo_packets as f64 / l.wall_s.max(1e-3), s.switch_frames as f64 / s.wall_s.max(1e-3))
    };
    let report = serde_json::json!({
        "benchmark": "net",
        "bytes": bytes,
        "loopback": { "packets": l.lo_packets, "wall_s": l.wall_s, "vtime_ns": l.vtime_ns,
                      "empty_packets": el.lo_packets, "empty_wall_s": el.wall_s, "packets_per_s": lo_pps,
                      "vmm_share": l.vmm_s / l.wall_s.max(1e-9) },
        "switch": { "frames": s.switch_frames, "wall_s": s.wall_s, "vtime_ns": s.vtime_ns,
                    "empty_frames": es.switch_frames, "empty_wall_s": es.wall_s, "packets_per_s": switch_pps,
                    "vmm_share": s.vmm_s / s.wall_s.max(1e-9) },
        "marginal": marginal,
        "ratio_switch_vs_loopback": switch_pps / lo_pps.max(1e-9),
        "nested_host": host.profile.nested_pvm,
    });
    if json {
        print_report(report.clone())?;
    } else {
        println!("TCP exchange of {bytes} bytes, node 1 -> node 0 through the switch vs loopback inside node 0:");
        let kind = if marginal { "marginal" } else { "gross: start-up noise too large, raise --bytes" };
        println!("  path                | packets | wall s (empty) | in VMM | virtual ms | packets/s ({kind})");
        for (name, p, e, pps, packets) in
            [("loopback (baseline)", &l, &el, lo_pps, l.lo_packets), ("switch", &s, &es, switch_pps, s.switch_frames)]
        {
            println!(
                "  {name:<19} | {packets:>7} | {:>6.2} ({:>5.2}) | {:>5.1}% | {:>10.1} | {pps:>10.1}",
                p.wall_s,
                e.wall_s,
                100.0 * p.vmm_s / p.wall_s.max(1e-9),
                p.vtime_ns as f64 / 1e6
            );
        }
        println!(
            "  ratio switch / loopback packets per second: {:.3}",
            report["ratio_switch_vs_loopback"].as_f64().unwrap()
        );
        if host.profile.nested_pvm {
            println!("  (host: nested kvm_pvm; the guest kernel runs emulated, so both paths are slow)");
        }
    }
    Ok(ExitCode::SUCCESS)
}
