//! Fault injection, as the Samza team tested their runtime: a seeded random source decides, per
//! task, when an input record is redelivered (the task drops its uncommitted work and reads
//! again from its committed positions, as after a rebalance) and when the task fails at a
//! chosen step of its commit (before the log commit, after it, after the local-state write).
//! A failed task is reopened from the committed log and its local state, exactly as a
//! restarted process would be. Results must not change: that is what the chaos tests check.
//!
//! `streamc run --chaos seed=S,redeliver=P,fail=P`.

use std::str::FromStr;

use crate::gen::Rng;

/// The steps of a commit where a task can be made to fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailPoint {
    /// The record cache is flushed, nothing is committed yet.
    BeforeLogCommit,
    /// Outputs, changelog records and offsets are committed; local state is not updated.
    AfterLogCommit,
    /// Local state and its checkpoint were just written.
    AfterStoreWrite,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChaosSpec {
    pub seed: u64,
    /// Probability, per input record, that the task's uncommitted input is redelivered.
    pub redeliver: f64,
    /// Probability, per commit and per fail point, that the task fails there.
    pub fail: f64,
}

impl FromStr for ChaosSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut spec = ChaosSpec { seed: 0, redeliver: 0.0, fail: 0.0 };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| format!("--chaos: `{part}` is not KEY=VALUE"))?;
            let prob = |v: &str| -> Result<f64, String> {
                match v.parse::<f64>() {
                    Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
                    _ => Err(format!("--chaos {k}={v}: expected a probability between 0 and 1")),
                }
            };
            match k {
                "seed" => {
                    spec.seed = v.parse().map_err(|_| format!("--chaos seed={v}: expected an unsigned integer"))?
                }
                "redeliver" => spec.redeliver = prob(v)?,
                "fail" => spec.fail = prob(v)?,
                _ => return Err(format!("--chaos: unknown key `{k}` (expected seed, redeliver, fail)")),
            }
        }
        Ok(spec)
    }
}

/// One task's fault source: its own stream of decisions, so faults do not depend on how tasks
/// are spread over threads.
pub struct Chaos {
    spec: ChaosSpec,
    rng: Rng,
    /// Faults injected so far.
    pub faults: u64,
}

/// FNV-1a.
pub fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ *b as u64).wrapping_mul(0x100_0000_01b3))
}

impl Chaos {
    pub fn new(spec: ChaosSpec, task: &str) -> Chaos {
        // The task's name, mixed with the seed.
        Chaos { spec, rng: Rng(spec.seed ^ fnv(task.as_bytes())), faults: 0 }
    }

    fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        let hit = ((self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p;
        self.faults += hit as u64;
        hit
    }

    /// Redeliver before this input record?
    pub fn redeliver(&mut self) -> bool {
        self.chance(self.spec.redeliver)
    }

    /// Fail at this step of the commit?
    pub fn fail(&mut self, _at: FailPoint) -> bool {
        self.chance(self.spec.fail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        assert_eq!(
            "seed=7,redeliver=0.01,fail=0.2".parse::<ChaosSpec>().unwrap(),
            ChaosSpec { seed: 7, redeliver: 0.01, fail: 0.2 }
        );
        assert!("seed=7,fail=2".parse::<ChaosSpec>().unwrap_err().contains("between 0 and 1"));
        assert!("seed=x".parse::<ChaosSpec>().unwrap_err().contains("unsigned"));
        assert!("boom=1".parse::<ChaosSpec>().unwrap_err().contains("unknown key"));
    }

    #[test]
    fn decisions_follow_the_seed_and_the_probability() {
        let spec = ChaosSpec { seed: 3, redeliver: 0.25, fail: 0.0 };
        let run = |name: &str| {
            let mut c = Chaos::new(spec, name);
            (0..10_000).map(|_| c.redeliver()).collect::<Vec<_>>()
        };
        assert_eq!(run("a"), run("a"));
        assert_ne!(run("a"), run("b"));
        let hits = run("a").iter().filter(|h| **h).count();
        assert!((2_200..2_800).contains(&hits), "{hits}");
        let mut never = Chaos::new(spec, "a");
        assert!((0..1000).all(|_| !never.fail(FailPoint::AfterLogCommit)));
    }
}
