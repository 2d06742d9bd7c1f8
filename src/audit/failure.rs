//! What a failed audit write does to the call (`audit.failure_mode`). The pipeline asks
//! [`FailureMode::on_failure`] and does what it says; this is the only place the rule lives.

use serde::Deserialize;

use super::record::Phase;

/// `audit.failure_mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureMode {
    /// No call completes without its records: a failed intent refuses the call before
    /// anything is sent; a failed outcome replaces the tool's result with the audit error,
    /// even when the tool ran.
    #[default]
    Strict,
    /// Reads proceed (with a note on stderr); calls with side effects behave as in
    /// `strict`.
    StrictMutations,
    /// Everything proceeds; failures are reported on stderr.
    BestEffort,
}

impl FailureMode {
    /// The string in configuration and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureMode::Strict => "strict",
            FailureMode::StrictMutations => "strict_mutations",
            FailureMode::BestEffort => "best_effort",
        }
    }

    /// What to do when writing a record of `phase` failed for a call that has
    /// (`side_effect`) or has not a side effect.
    pub fn on_failure(self, phase: Phase, side_effect: bool) -> OnFailure {
        match (self, phase, side_effect) {
            (FailureMode::BestEffort, _, _) => OnFailure::Proceed,
            // The request is refused whatever the audit does.
            (_, Phase::AuthFailure | Phase::Prune, _) => OnFailure::Proceed,
            // A decision is stored only once its record is durable.
            (_, Phase::ApprovalDecision, _) => OnFailure::Refuse,
            (FailureMode::StrictMutations, Phase::Outcome, false) => OnFailure::Proceed,
            (_, Phase::Intent, _) => OnFailure::Refuse,
            (_, Phase::Outcome, _) => OnFailure::FailCall,
        }
    }
}

/// What the pipeline does after a failed audit write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnFailure {
    /// Refuse the call before it runs; nothing reaches the upstream.
    Refuse,
    /// Return the audit error instead of the tool's result (the tool may have run).
    FailCall,
    /// Go on as if the write had succeeded (the failure is reported on stderr).
    Proceed,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_phase_and_effect() {
        use FailureMode::*;
        use OnFailure::*;
        use Phase::*;
        let table = [
            (Strict, Intent, true, Refuse),
            (Strict, Outcome, true, FailCall),
            (Strict, Outcome, false, FailCall),
            (StrictMutations, Intent, true, Refuse),
            (StrictMutations, Outcome, true, FailCall),
            (StrictMutations, Outcome, false, Proceed),
            (BestEffort, Intent, true, Proceed),
            (BestEffort, Outcome, true, Proceed),
            (BestEffort, Outcome, false, Proceed),
        ];
        for (mode, phase, effect, expected) in table {
            assert_eq!(
                mode.on_failure(phase, effect),
                expected,
                "{mode:?} {phase:?} {effect}"
            );
        }
    }
}
