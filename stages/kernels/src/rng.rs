//! The golden generator's random stream: Marsaglia xorshift32 (13, 17, 5).
//!
//! Spec: `spec/kernel-goldens.md` §1 and §10. A draw returns the state *after* the step;
//! one stream, seeded with [`crate::SEED`], is threaded through all kernels in the seed's
//! order. Bytes are the low 8 bits of a draw; `U() = (draw >> 8) · 2⁻²⁴` (exact in f32 and
//! f64); `R(a, b) = a + (b − a)·U()` evaluated in f64 and rounded once to f32.

/// The xorshift32 generator plus a count of draws taken (the spec states running totals).
#[derive(Debug, Clone)]
pub struct XorShift32 {
    state: u32,
    draws: u64,
}

impl XorShift32 {
    /// A generator seeded with `seed` (must be non-zero for a useful stream).
    pub fn new(seed: u32) -> Self {
        XorShift32 {
            state: seed,
            draws: 0,
        }
    }

    /// The next draw: the state after one xorshift step.
    pub fn next_u32(&mut self) -> u32 {
        let mut x = self.state;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.state = x;
        self.draws += 1;
        x
    }

    /// Draws taken so far.
    pub fn draws(&self) -> u64 {
        self.draws
    }

    /// One byte: the low 8 bits of a draw.
    pub fn byte(&mut self) -> u8 {
        (self.next_u32() & 0xff) as u8
    }

    /// `U()`: the top 24 bits of a draw scaled to [0, 1).
    pub fn unit(&mut self) -> f64 {
        f64::from(self.next_u32() >> 8) * (1.0 / 16_777_216.0)
    }

    /// `R(a, b) = a + (b − a)·U()`, in f64, rounded once to f32.
    pub fn range(&mut self, a: f64, b: f64) -> f32 {
        (a + (b - a) * self.unit()) as f32
    }

    /// `n` values of `R(a, b)`.
    pub fn range_vec(&mut self, n: usize, a: f64, b: f64) -> Vec<f32> {
        (0..n).map(|_| self.range(a, b)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reproduces_the_spec_draw_values() {
        let mut r = XorShift32::new(crate::SEED);
        let draws: Vec<u32> = (0..24800).map(|_| r.next_u32()).collect();
        assert_eq!(
            &draws[..4],
            &[0x510C_4619, 0xE02E_553E, 0x7BB9_8F3A, 0x0183_A8B5]
        );
        assert_eq!(draws[20448], 0x159E_270D);
        assert_eq!(draws[20449], 0xFE82_19F2);
        assert_eq!(draws[20704], 0x9A85_7B3B);
        assert_eq!(draws[22752], 0x94F9_4D3C);
        assert_eq!(draws[24799], 0x1358_459F);
        assert_eq!(r.draws(), 24800);
    }

    #[test]
    fn range_minus_one_one_is_exact_and_in_range() {
        let mut r = XorShift32::new(crate::SEED);
        for _ in 0..10_000 {
            let mut c = r.clone();
            let u = c.unit();
            let v = r.range(-1.0, 1.0);
            assert_eq!(f64::from(v), -1.0 + 2.0 * u, "R(-1,1) is exact in f32");
            assert!((-1.0..1.0).contains(&v));
        }
    }
}
