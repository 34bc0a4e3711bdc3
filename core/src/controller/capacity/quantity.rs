//! Kubernetes resource quantities (`resource.Quantity`): `<number><suffix>` with a
//! decimal SI suffix (`n u m "" k M G T P E`), a binary one (`Ki … Ei`) or a decimal
//! exponent (`e3`, `E-2`). The value is rounded up, as the API machinery's `Value()`
//! and `MilliValue()` do.

/// The amount in base units (`milli`: in thousandths, for `cpu`), rounded up;
/// `None` for text that is not a quantity or does not fit an `i64`.
pub fn parse_quantity(text: &str, milli: bool) -> Option<i64> {
    let text = text.trim();
    let (negative, rest) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let number_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return None;
    }
    // The number as digits / 10^scale.
    let digits: String = format!("{whole}{fraction}");
    let mut numerator: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    let mut ten_exp: i32 = -i32::try_from(fraction.len()).ok()?;
    let mut two_exp: u32 = 0;
    match suffix {
        "" => {}
        "n" => ten_exp -= 9,
        "u" => ten_exp -= 6,
        "m" => ten_exp -= 3,
        "k" => ten_exp += 3,
        "M" => ten_exp += 6,
        "G" => ten_exp += 9,
        "T" => ten_exp += 12,
        "P" => ten_exp += 15,
        "E" => ten_exp += 18,
        "Ki" => two_exp = 10,
        "Mi" => two_exp = 20,
        "Gi" => two_exp = 30,
        "Ti" => two_exp = 40,
        "Pi" => two_exp = 50,
        "Ei" => two_exp = 60,
        _ => {
            let exp = suffix
                .strip_prefix('e')
                .or_else(|| suffix.strip_prefix('E'))?;
            let valid = !exp.is_empty()
                && exp
                    .trim_start_matches(['+', '-'])
                    .chars()
                    .all(|c| c.is_ascii_digit());
            if !valid {
                return None;
            }
            ten_exp += exp.parse::<i32>().ok()?;
        }
    }
    if milli {
        ten_exp += 3;
    }
    numerator = numerator.checked_mul(1i128.checked_shl(two_exp)?)?;
    let value = if ten_exp >= 0 {
        numerator.checked_mul(10i128.checked_pow(u32::try_from(ten_exp).ok()?)?)?
    } else {
        let divisor = 10i128.checked_pow(u32::try_from(-ten_exp).ok()?);
        match divisor {
            // Rounded up (away from zero for the magnitude, as `Value()` does).
            Some(d) => numerator.checked_add(d - 1)? / d,
            // Smaller than any unit: a positive amount rounds up to 1.
            None => i128::from(numerator > 0),
        }
    };
    let value = if negative { -value } else { value };
    i64::try_from(value).ok()
}

#[cfg(test)]
mod tests {
    use super::parse_quantity;

    #[test]
    fn quantities_as_the_api_machinery_reads_them() {
        // (text, milli, expected): Kubernetes' quantity_test cases and the rounding of
        // Value() / MilliValue().
        let cases: &[(&str, bool, Option<i64>)] = &[
            ("100m", true, Some(100)),
            ("1", true, Some(1000)),
            ("0.5", true, Some(500)),
            ("1.5", true, Some(1500)),
            ("2", false, Some(2)),
            ("1k", false, Some(1000)),
            ("1Ki", false, Some(1024)),
            ("128Mi", false, Some(134_217_728)),
            ("1Gi", false, Some(1_073_741_824)),
            ("1G", false, Some(1_000_000_000)),
            ("1.5Gi", false, Some(1_610_612_736)),
            ("1e3", false, Some(1000)),
            ("1E-3", true, Some(1)),
            ("12e-1", false, Some(2)),
            ("100m", false, Some(1)),
            ("1n", true, Some(1)),
            ("0", true, Some(0)),
            (".5", true, Some(500)),
            ("5.", false, Some(5)),
            ("+3", false, Some(3)),
            ("-3", false, Some(-3)),
            ("1Ei", false, Some(1_152_921_504_606_846_976)),
            ("8Ei", false, None),
            ("", false, None),
            ("m", false, None),
            ("1.2.3", false, None),
            ("1Q", false, None),
            ("1e", false, None),
            ("1e+", false, None),
            ("1 Gi", false, None),
            // Far past i64 (and near i128's end): refused, never overflowing.
            ("170141183460469231731687303715884105727m", false, None),
            ("99999999999999999999999999999999999999999", false, None),
        ];
        for (text, milli, want) in cases {
            assert_eq!(
                parse_quantity(text, *milli),
                *want,
                "{text:?} milli={milli}"
            );
        }
    }
}
