//! Buggify: faulty behaviour a program turns on at its own code points, with
//! FoundationDB's semantics. The program asks, by site name, whether to
//! misbehave now (`{"hvsim_buggify": {"name": ...}}` on the SDK channel,
//! then a read, like a draw: see `control.rs`). In each timeline a site is
//! enabled or not, decided the first time the timeline reaches it after
//! setup complete (with probability [`ENABLE`]); an enabled site then fires
//! each time it is reached with probability `fire` (default [`FIRE`]).
//!
//! The table lives in the machine, so the decision is the same for every
//! process and across restarts within a timeline, a snapshot carries it,
//! and since every draw comes from the `buggify` stream (re-keyed with the
//! others at each branch) a replay decides the same. Before setup complete
//! nothing fires and nothing is decided: the root is shared by every
//! timeline, and each should decide for itself (drawn faults arm at the
//! same point).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::entropy::Stream;

/// The chance that a site is enabled in a timeline.
pub const ENABLE: f64 = 0.25;
/// The chance that an enabled site fires when reached, unless the program
/// gives its own.
pub const FIRE: f64 = 0.25;
/// Sites kept per machine: the guest is untrusted, its site names too.
pub const MAX_SITES: usize = 4096;
/// The longest site name kept.
pub const MAX_NAME: usize = 256;

/// One site in this timeline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Site {
    pub enabled: bool,
    /// Times reached since setup complete.
    pub reached: u64,
    /// Times it fired.
    pub fired: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Buggify {
    stream: Stream,
    /// Setup complete: sites are decided and may fire.
    armed: bool,
    sites: BTreeMap<String, Site>,
    /// Reaches of sites beyond [`MAX_SITES`] or with names beyond
    /// [`MAX_NAME`]: never fired.
    refused: u64,
    /// Sites that do not fire (`Vetoes`): still decided and drawn.
    #[serde(default)]
    vetoes: super::Vetoes,
}

impl Default for Buggify {
    fn default() -> Buggify {
        Buggify::new(0)
    }
}

impl Buggify {
    pub fn new(seed: u64) -> Buggify {
        Buggify {
            stream: Stream::new(seed, "buggify"),
            armed: false,
            sites: BTreeMap::new(),
            refused: 0,
            vetoes: Default::default(),
        }
    }

    /// From now on, the sites `vetoes` names do not fire.
    pub fn veto(&mut self, vetoes: &super::Vetoes) {
        self.vetoes = vetoes.clone();
    }

    pub fn reseed(&mut self, seed: u64) {
        self.stream.reseed(seed);
    }

    /// Setup complete: from now on sites are decided and fire.
    pub fn arm(&mut self) {
        self.armed = true;
    }

    /// Site `name` is reached: whether it fires now. `fire`: the program's
    /// chance for an enabled site (clamped to 0..=1), else [`FIRE`].
    pub fn reach(&mut self, name: &str, fire: Option<f64>) -> bool {
        if !self.armed {
            return false;
        }
        if name.len() > MAX_NAME || (self.sites.len() >= MAX_SITES && !self.sites.contains_key(name)) {
            self.refused += 1;
            return false;
        }
        let stream = &mut self.stream;
        let site = self
            .sites
            .entry(name.to_owned())
            .or_insert_with(|| Site { enabled: chance(stream, ENABLE), ..Site::default() });
        site.reached += 1;
        let drawn = site.enabled && chance(stream, fire.filter(|p| p.is_finite()).unwrap_or(FIRE).clamp(0.0, 1.0));
        let fires = drawn && self.vetoes.fires(name);
        site.fired += u64::from(fires);
        fires
    }

    /// Every site this timeline reached since setup complete.
    pub fn sites(&self) -> &BTreeMap<String, Site> {
        &self.sites
    }

    pub fn refused(&self) -> u64 {
        self.refused
    }
}

/// True with probability `p`, drawn from `stream`.
fn chance(stream: &mut Stream, p: f64) -> bool {
    ((stream.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With `buggify_only`, other sites are decided and drawn as before
    /// (so the stream stays where it was) but do not fire.
    #[test]
    fn sites_outside_buggify_only_are_decided_but_do_not_fire() {
        let mut all = Buggify::new(7);
        all.arm();
        let mut only = all.clone();
        only.veto(&crate::faults::Vetoes { buggify_only: Some(["b".to_owned()].into()), ..Default::default() });
        for _ in 0..200 {
            for name in ["a", "b", "c"] {
                let (x, y) = (all.reach(name, Some(0.5)), only.reach(name, Some(0.5)));
                assert_eq!(y, x && name == "b", "{name}");
            }
        }
        for (name, site) in only.sites() {
            assert_eq!(site.enabled, all.sites()[name].enabled, "{name}: decided the same");
        }
    }

    #[test]
    fn a_site_is_decided_once_per_timeline_and_only_enabled_sites_fire() {
        let mut b = Buggify::new(1);
        assert!(!b.reach("early", None), "nothing fires before setup complete");
        assert!(b.sites().is_empty());
        b.arm();
        let names: Vec<String> = (0..200).map(|i| format!("site {i}")).collect();
        for _ in 0..20 {
            for n in &names {
                b.reach(n, None);
            }
        }
        let enabled = b.sites().values().filter(|s| s.enabled).count();
        assert!((25..=75).contains(&enabled), "about a quarter enabled: {enabled}");
        for s in b.sites().values() {
            assert_eq!(s.reached, 20);
            if !s.enabled {
                assert_eq!(s.fired, 0);
            }
        }
        let fired: u64 = b.sites().values().map(|s| s.fired).sum();
        assert!(
            fired > 0 && fired < 20 * enabled as u64 / 2,
            "enabled sites fire about a quarter of the time: {fired}"
        );
        // An enabled site always fires when the program says so, never when
        // it says 0; a disabled one never fires, whatever the program says.
        let site = |enabled: bool| b.sites().iter().find(|(_, s)| s.enabled == enabled).map(|(n, _)| n.clone());
        let (on, off) = (site(true).unwrap(), site(false).unwrap());
        assert!((0..10).all(|_| b.reach(&on, Some(1.0))) && !(0..10).any(|_| b.reach(&on, Some(0.0))));
        assert!(!(0..10).any(|_| b.reach(&off, Some(1.0))), "a disabled site fired");
        // A probability that is not a number is the default one, not 0 or 1.
        let nan = (0..400).filter(|_| b.reach(&on, Some(f64::NAN))).count();
        assert!((50..=150).contains(&nan), "NaN fires at the default rate (FIRE = {FIRE}): {nan} of 400");
    }

    #[test]
    fn the_same_seed_decides_the_same_and_another_differently() {
        let run = |seed| {
            let mut b = Buggify::new(seed);
            b.arm();
            (0..64).map(|i| b.reach(&format!("s{}", i % 8), None)).collect::<Vec<bool>>()
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
    }

    #[test]
    fn hostile_names_are_bounded() {
        let mut b = Buggify::new(1);
        b.arm();
        assert!(!b.reach(&"x".repeat(MAX_NAME + 1), Some(1.0)));
        for i in 0..MAX_SITES + 10 {
            b.reach(&i.to_string(), None);
        }
        assert_eq!((b.sites().len(), b.refused()), (MAX_SITES, 11));
    }
}
