//! Int-or-percent arithmetic. Every percentage is rounded **up** (reference §4.10).

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use thiserror::Error;

/// Why an int-or-string value cannot be scaled.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PercentError {
    /// A string without a trailing `%` (the reference accepted `"50"` in some places).
    #[error("invalid value {0:?}: a string value must be a percentage such as \"50%\"")]
    NotPercent(String),
    /// Not an integer before the `%`.
    #[error("invalid value {0:?}: not an integer percentage")]
    Invalid(String),
}

/// The percentage of a string value (`"30%"` → 30).
pub fn parse_percent(s: &str) -> Result<i64, PercentError> {
    let digits = s
        .strip_suffix('%')
        .ok_or_else(|| PercentError::NotPercent(s.to_string()))?;
    parse_go_int(digits).ok_or_else(|| PercentError::Invalid(s.to_string()))
}

/// `strconv.Atoi`: optional sign, ASCII digits only.
pub(crate) fn parse_go_int(s: &str) -> Option<i64> {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<i64>().ok()
}

/// True for a string value (the caller decides whether it must be a percentage).
pub fn is_percent(v: &IntOrString) -> bool {
    matches!(v, IntOrString::String(_))
}

/// `GetScaledValueFromIntOrPercent(v, total, roundUp=true)`: integers as they are,
/// percentages of `total` rounded up.
pub fn scaled_value(v: &IntOrString, total: i32) -> Result<i32, PercentError> {
    Scaler::of(v).map(|s| s.at(total))
}

/// An int-or-percent parsed once, to scale to many totals ([`scaled_value`]'s rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scaler {
    Int(i32),
    Percent(i64),
}

impl Scaler {
    pub fn of(v: &IntOrString) -> Result<Self, PercentError> {
        match v {
            IntOrString::Int(i) => Ok(Scaler::Int(*i)),
            IntOrString::String(s) => parse_percent(s).map(Scaler::Percent),
        }
    }

    /// The value at `total` (percentages rounded up).
    pub fn at(self, total: i32) -> i32 {
        match self {
            Scaler::Int(i) => i,
            Scaler::Percent(pct) => saturate(ceil_div(pct.saturating_mul(i64::from(total)), 100)),
        }
    }
}

fn ceil_div(a: i64, b: i64) -> i64 {
    a.div_euclid(b) + i64::from(a.rem_euclid(b) != 0)
}

fn saturate(v: i64) -> i32 {
    v.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pct(s: &str) -> IntOrString {
        IntOrString::String(s.to_string())
    }

    #[test]
    fn reference_ceil_examples() {
        // §4.10: 80% of 5 → 4; 34/33/33% of 10 → 4/4/4; 50% of 14 → 7; 50% of 0 → 0;
        // 25% of 4 → 1; 75% of 4 → 3.
        let cases = [
            ("80%", 5, 4),
            ("34%", 10, 4),
            ("33%", 10, 4),
            ("50%", 14, 7),
            ("50%", 0, 0),
            ("25%", 4, 1),
            ("75%", 4, 3),
            ("100%", 5, 5),
            ("20%", 10, 2),
            ("30%", 10, 3),
        ];
        for (p, total, want) in cases {
            assert_eq!(scaled_value(&pct(p), total), Ok(want), "{p} of {total}");
        }
        assert_eq!(scaled_value(&IntOrString::Int(5), 100), Ok(5));
    }

    #[test]
    fn rejects_non_percent_strings() {
        assert_eq!(
            scaled_value(&pct("50"), 10),
            Err(PercentError::NotPercent("50".into()))
        );
        for bad in ["0.2%", "50.2%", "%", "a%", "5 %"] {
            assert!(
                matches!(scaled_value(&pct(bad), 10), Err(PercentError::Invalid(_))),
                "{bad}"
            );
        }
        assert_eq!(scaled_value(&pct("-1%"), 100), Ok(-1));
        assert_eq!(scaled_value(&pct("+5%"), 100), Ok(5));
    }

    proptest! {
        #[test]
        fn sum_of_ceil_covers_replicas(parts in prop::collection::vec(0i64..=100, 1..6), replicas in 0i32..10_000) {
            // Percentages summing to 100 always give at least `replicas` slots.
            let total: i64 = parts.iter().sum();
            prop_assume!(total > 0);
            let mut pcts: Vec<i64> = parts.iter().map(|p| p * 100 / total).collect();
            let rest = 100 - pcts.iter().sum::<i64>();
            pcts[0] += rest;
            let sum: i32 = pcts.iter().map(|p| scaled_value(&pct(&format!("{p}%")), replicas).unwrap()).sum();
            prop_assert!(sum >= replicas);
            prop_assert!(sum <= replicas + pcts.len() as i32);
        }
    }
}
