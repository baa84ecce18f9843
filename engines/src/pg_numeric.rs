//! PostgreSQL's numeric division, and so `avg` of numerics and integers (`sum / count`).
//!
//! PostgreSQL chooses a quotient's scale per value (`select_div_scale` in its `numeric.c`):
//! at least 16 significant digits, never fewer decimals than either operand shows, the
//! quotient rounded half away from zero — `1.0 / 3` is `0.33333333333333333333`, `7.0 / 2` is
//! `3.5000000000000000`. Arrow decimals have one scale per column, so no engine's decimal
//! division can give that; this module computes it from the operands, exactly (big integers).

use num_bigint::BigInt;
use num_integer::Integer;
use num_traits::{Signed, Zero};

/// A numeric value: `unscaled × 10^-scale`, shown with `scale` decimals (PostgreSQL's dscale).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Numeric {
    /// The digits, as an integer.
    pub unscaled: BigInt,
    /// Decimals shown.
    pub scale: u32,
}

/// Division by zero (SQLSTATE 22012 in PostgreSQL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("division by zero")]
pub struct DivisionByZero;

/// At least this many significant digits (PostgreSQL's `NUMERIC_MIN_SIG_DIGITS`).
const MIN_SIG_DIGITS: i64 = 16;
/// Decimal digits per base-10000 digit (`DEC_DIGITS`).
const DEC_DIGITS: i64 = 4;
/// Largest display scale (`NUMERIC_MAX_DISPLAY_SCALE`).
const MAX_DISPLAY_SCALE: i64 = 1000;

impl Numeric {
    /// `unscaled × 10^-scale`.
    pub fn new(unscaled: impl Into<BigInt>, scale: u32) -> Self {
        Self {
            unscaled: unscaled.into(),
            scale,
        }
    }

    /// PostgreSQL's (weight, first digit) of this value in base 10000, digits aligned on the
    /// decimal point: `40317.23` is (1, 4), `0.0123` is (-1, 123), zero is (0, 0).
    fn weight_and_first_digit(&self) -> (i64, u32) {
        if self.unscaled.is_zero() {
            return (0, 0);
        }
        let digits = self.unscaled.abs().to_string();
        let scale = self.scale as usize;
        if digits.len() > scale {
            let integer = &digits[..digits.len() - scale];
            let n = integer.len() as i64;
            let weight = (n - 1) / DEC_DIGITS;
            let lead = (n - weight * DEC_DIGITS) as usize;
            (weight, integer[..lead].parse().unwrap_or(0))
        } else {
            let fraction = format!("{}{digits}", "0".repeat(scale - digits.len()));
            let first = fraction.find(|c| c != '0').unwrap_or(0);
            let group = first / DEC_DIGITS as usize;
            let start = group * DEC_DIGITS as usize;
            let mut four: String = fraction.chars().skip(start).take(4).collect();
            while four.len() < 4 {
                four.push('0');
            }
            (-(group as i64) - 1, four.parse().unwrap_or(0))
        }
    }

    /// The text PostgreSQL prints: every one of `scale` decimals.
    pub fn to_text(&self) -> String {
        let negative = self.unscaled.is_negative();
        let digits = self.unscaled.abs().to_string();
        let scale = self.scale as usize;
        let mut out = String::with_capacity(digits.len() + 3);
        if negative {
            out.push('-');
        }
        if scale == 0 {
            out.push_str(&digits);
        } else if digits.len() > scale {
            out.push_str(&digits[..digits.len() - scale]);
            out.push('.');
            out.push_str(&digits[digits.len() - scale..]);
        } else {
            out.push_str("0.");
            out.push_str(&"0".repeat(scale - digits.len()));
            out.push_str(&digits);
        }
        out
    }
}

fn ten(power: u32) -> BigInt {
    BigInt::from(10).pow(power)
}

/// `q` (the truncated quotient of `numerator / denominator`, remainder `r`) rounded half away
/// from zero.
fn rounded_half_away(q: BigInt, r: &BigInt, denominator: &BigInt, negative: bool) -> BigInt {
    if r.abs() * 2 >= denominator.abs() {
        q + if negative { -1 } else { 1 }
    } else {
        q
    }
}

impl Numeric {
    /// The unscaled digits at `scale` decimals (at least this value's: digits are only added).
    pub fn unscaled_at(&self, scale: u32) -> BigInt {
        &self.unscaled * ten(scale.saturating_sub(self.scale))
    }

    /// PostgreSQL's `round(numeric, places)`: half away from zero, `places` decimals (none for
    /// negative places, which round to tens, hundreds, ...).
    pub fn round(&self, places: i64) -> Numeric {
        let keep = places.max(0) as u32;
        let drop = i64::from(self.scale) - places;
        if drop <= 0 {
            return Numeric::new(self.unscaled_at(keep), keep);
        }
        let unit = ten(drop as u32);
        let (q, r) = self.unscaled.div_rem(&unit);
        let q = rounded_half_away(q, &r, &unit, self.unscaled.is_negative());
        if places < 0 {
            Numeric::new(q * ten((-places) as u32), 0)
        } else {
            Numeric::new(q, keep)
        }
    }
}

/// The scale PostgreSQL gives `a / b`.
pub fn division_scale(a: &Numeric, b: &Numeric) -> u32 {
    let (w1, d1) = a.weight_and_first_digit();
    let (w2, d2) = b.weight_and_first_digit();
    let mut qweight = w1 - w2;
    if d1 <= d2 {
        qweight -= 1;
    }
    let rscale = (MIN_SIG_DIGITS - qweight * DEC_DIGITS)
        .max(i64::from(a.scale))
        .max(i64::from(b.scale))
        .clamp(0, MAX_DISPLAY_SCALE);
    rscale as u32
}

/// `a / b` as PostgreSQL computes it.
///
/// # Errors
/// [`DivisionByZero`].
pub fn divide(a: &Numeric, b: &Numeric) -> Result<Numeric, DivisionByZero> {
    if b.unscaled.is_zero() {
        return Err(DivisionByZero);
    }
    let rscale = division_scale(a, b);
    // a/b × 10^rscale = ua × 10^(sb + rscale) / (ub × 10^sa)
    let numerator = &a.unscaled * ten(b.scale + rscale);
    let denominator = &b.unscaled * ten(a.scale);
    let (quotient, remainder) = numerator.div_rem(&denominator);
    let negative = numerator.is_negative() != denominator.is_negative();
    Ok(Numeric::new(
        rounded_half_away(quotient, &remainder, &denominator, negative),
        rscale,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(text: &str) -> Numeric {
        let (int, frac) = text.split_once('.').unwrap_or((text, ""));
        let digits = format!("{int}{frac}");
        Numeric::new(digits.parse::<BigInt>().expect("digits"), frac.len() as u32)
    }

    fn div(a: &str, b: &str) -> String {
        divide(&n(a), &n(b)).expect("divides").to_text()
    }

    #[test]
    fn quotients_have_postgresqls_scale() {
        // (a, b, PostgreSQL 15's a / b)
        let cases = [
            ("7.0", "2", "3.5000000000000000"),
            ("1.0", "3", "0.33333333333333333333"),
            ("2.0", "3", "0.66666666666666666667"),
            ("10", "4.0", "2.5000000000000000"),
            ("10.0", "3", "3.3333333333333333"),
            ("36.66", "1", "36.6600000000000000"),
            ("-1.0", "3", "-0.33333333333333333333"),
            ("1", "-8.0", "-0.12500000000000000000"),
            ("123456.78", "0.0001", "1234567800.00000000"),
            ("0.0001", "123456.78", "0.0000000008100000664200054464"),
            ("711238.41", "1500", "474.1589400000000000"),
        ];
        for (a, b, pg) in cases {
            assert_eq!(div(a, b), pg, "{a} / {b}");
        }
        assert_eq!(divide(&n("1"), &n("0.00")), Err(DivisionByZero));
        assert_eq!(div("0", "7"), "0.00000000000000000000");
    }

    #[test]
    fn rounding_is_half_away_from_zero() {
        assert_eq!(n("2.45").round(1).to_text(), "2.5");
        assert_eq!(n("-2.45").round(1).to_text(), "-2.5");
        assert_eq!(n("1234.5").round(-2).to_text(), "1200");
        assert_eq!(n("3").round(2).to_text(), "3.00");
    }

    #[test]
    fn weights_are_base_10000_aligned_on_the_point() {
        assert_eq!(n("40317.23").weight_and_first_digit(), (1, 4));
        assert_eq!(n("9999").weight_and_first_digit(), (0, 9999));
        assert_eq!(n("0.0123").weight_and_first_digit(), (-1, 123));
        assert_eq!(n("0.00001").weight_and_first_digit(), (-2, 1000));
        assert_eq!(n("0").weight_and_first_digit(), (0, 0));
    }
}
