//! Kernel 1: Q3_K dequantisation and Q3_K × f32 mat-vec (spec §3).
//!
//! Block layout (ggml `block_q3_K`, 110 bytes, QK_K = 256): `hmask[32]` (third bit of each
//! quant), `qs[64]` (low two bits, four per byte), `scales[12]` (sixteen 6-bit sub-block
//! scales, packed), `d` (IEEE binary16, little-endian).
//!
//! Precision of the reference: dequantised values `(d · sc) · q` are exact in f32 (an 11-bit
//! mantissa times a 6-bit and a 3-bit integer). The mat-vec multiplies the *float*
//! activations (no Q8_K/Q8_1 quantisation of `x`), sums the exact products in f64 in column
//! order, and rounds each output once to f32. A float-activation GPU kernel therefore differs
//! only by its own f32 summation order (about 1e-6 relative); a kernel that quantises `x` to
//! 8 bits first differs by about 1e-3 relative.

/// Elements per super-block.
pub const QK_K: usize = 256;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 110;

/// One Q3_K super-block, field for field as ggml lays it out.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ3K {
    /// High (third) bit of each quant: byte k holds bit (4n + j) of element 128n + 32j + k.
    pub hmask: [u8; 32],
    /// Low two bits of each quant, four per byte.
    pub qs: [u8; 64],
    /// Sixteen 6-bit scales, packed (low nibbles in bytes 0..8, high pairs in bytes 8..12).
    pub scales: [u8; 12],
    /// Super-block scale, IEEE binary16 little-endian bytes.
    pub d: [u8; 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ3K>() == BLOCK_BYTES);

impl BlockQ3K {
    /// The block stored in `bytes` (exactly [`BLOCK_BYTES`] long).
    pub fn from_bytes(bytes: &[u8; BLOCK_BYTES]) -> Self {
        let mut b = BlockQ3K {
            hmask: [0; 32],
            qs: [0; 64],
            scales: [0; 12],
            d: [0; 2],
        };
        b.hmask.copy_from_slice(&bytes[0..32]);
        b.qs.copy_from_slice(&bytes[32..96]);
        b.scales.copy_from_slice(&bytes[96..108]);
        b.d.copy_from_slice(&bytes[108..110]);
        b
    }

    /// The 110 bytes of the block.
    pub fn to_bytes(&self) -> [u8; BLOCK_BYTES] {
        let mut out = [0; BLOCK_BYTES];
        out[0..32].copy_from_slice(&self.hmask);
        out[32..96].copy_from_slice(&self.qs);
        out[96..108].copy_from_slice(&self.scales);
        out[108..110].copy_from_slice(&self.d);
        out
    }

    /// The signed 6-bit scale of sub-block `is` (0..16), in [−32, 31].
    pub fn scale(&self, is: usize) -> i32 {
        let lo4 = if is < 8 {
            self.scales[is] & 0xF
        } else {
            self.scales[is - 8] >> 4
        };
        let hi2 = (self.scales[8 + is % 4] >> (2 * (is / 4))) & 3;
        i32::from(lo4 | (hi2 << 4)) - 32
    }

    /// The super-block scale as f32 (the binary16 → binary32 conversion is exact).
    pub fn d(&self) -> f32 {
        f16_to_f32(u16::from_le_bytes(self.d))
    }

    /// The 256 dequantised values.
    pub fn dequantize(&self) -> [f32; QK_K] {
        let d = self.d();
        let mut y = [0.0f32; QK_K];
        for is in 0..16 {
            let (n, j, h) = (is / 8, (is % 8) / 2, is % 2);
            let dl = d * self.scale(is) as f32;
            for l in 0..16 {
                let q2 = i32::from((self.qs[32 * n + 16 * h + l] >> (2 * j)) & 3);
                let high = (self.hmask[16 * h + l] >> (4 * n + j)) & 1;
                let q = q2 - if high == 1 { 0 } else { 4 };
                y[128 * n + 32 * j + 16 * h + l] = dl * q as f32;
            }
        }
        y
    }
}

/// Dequantise the blocks of `weight` (a whole number of 110-byte blocks) back to back.
pub fn dequantize(weight: &[u8]) -> Vec<f32> {
    weight
        .chunks_exact(BLOCK_BYTES)
        .flat_map(|chunk| {
            let mut bytes = [0u8; BLOCK_BYTES];
            bytes.copy_from_slice(chunk);
            BlockQ3K::from_bytes(&bytes).dequantize()
        })
        .collect()
}

/// `out[r] = Σ_c W[r][c] · x[c]` for a row-major Q3_K matrix of `x.len()` columns
/// (a multiple of 256): f64 accumulation of exact products, one rounding per output.
pub fn matvec(weight: &[u8], x: &[f32]) -> Vec<f32> {
    let w = dequantize(weight);
    let cols = x.len().max(1);
    w.chunks_exact(cols)
        .map(|row| {
            let sum: f64 = row
                .iter()
                .zip(x)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum();
            sum as f32
        })
        .collect()
}

/// IEEE binary16 bits → f32 (exact).
pub fn f16_to_f32(bits: u16) -> f32 {
    let sign = if bits & 0x8000 != 0 { -1.0f32 } else { 1.0 };
    let exp = i32::from((bits >> 10) & 0x1F);
    let man = f32::from(bits & 0x3FF);
    match exp {
        0 => sign * man * (2.0f32).powi(-24),
        31 if man == 0.0 => sign * f32::INFINITY,
        31 => f32::NAN,
        _ => sign * (1.0 + man / 1024.0) * (2.0f32).powi(exp - 15),
    }
}

/// f32 → IEEE binary16 bits, round to nearest, ties to even (as ggml's converter), for
/// finite values; overflow gives ±Inf, NaN a quiet NaN.
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xFF) as i32;
    let man = bits & 0x7F_FFFF;
    if exp == 0xFF {
        return sign | if man == 0 { 0x7C00 } else { 0x7E00 };
    }
    // Value = 1.man × 2^(exp−127) (normals) or 0.man × 2^−126 (subnormals).
    let e = exp - 127 + 15;
    let full = if exp == 0 { man } else { man | 0x80_0000 };
    // Right shift so the half mantissa (with implicit bit) sits in the low 11 bits.
    let shift = if e >= 1 {
        13
    } else {
        13 + 1 - e - i32::from(exp == 0)
    };
    let shift = shift.min(31) as u32;
    let kept = full >> shift;
    let rem = full & ((1u32 << shift) - 1);
    let halfway = 1u32 << (shift - 1);
    let mut h = if e >= 1 {
        ((e as u32) << 10) + (kept & 0x3FF)
    } else {
        kept
    };
    if rem > halfway || (rem == halfway && h & 1 == 1) {
        h += 1; // may carry into the exponent, which is the right result
    }
    if e >= 31 || h >= 0x7C00 {
        return sign | 0x7C00;
    }
    sign | h as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::XorShift32;

    /// ggml's `dequantize_row_q3_K` scale unpacking via the `kmask1`/`kmask2` aux words.
    fn ggml_scales(scales: &[u8; 12]) -> [i8; 16] {
        const KMASK1: u32 = 0x0303_0303;
        const KMASK2: u32 = 0x0f0f_0f0f;
        let word = |i: usize| {
            u32::from_le_bytes([
                scales[4 * i],
                scales[4 * i + 1],
                scales[4 * i + 2],
                scales[4 * i + 3],
            ])
        };
        let (a0, a1, tmp) = (word(0), word(1), word(2));
        let aux = [
            (a0 & KMASK2) | ((tmp & KMASK1) << 4),
            (a1 & KMASK2) | (((tmp >> 2) & KMASK1) << 4),
            ((a0 >> 4) & KMASK2) | (((tmp >> 4) & KMASK1) << 4),
            ((a1 >> 4) & KMASK2) | (((tmp >> 6) & KMASK1) << 4),
        ];
        let mut out = [0i8; 16];
        for (i, v) in out.iter_mut().enumerate() {
            *v = ((aux[i / 4] >> (8 * (i % 4))) & 0xFF) as u8 as i8;
        }
        out
    }

    /// ggml's `dequantize_row_q3_K` loop structure, transcribed.
    fn ggml_dequant(b: &BlockQ3K) -> [f32; QK_K] {
        let sc = ggml_scales(&b.scales);
        let d_all = b.d();
        let mut y = [0.0f32; QK_K];
        let (mut yi, mut is, mut m) = (0, 0, 1u8);
        for n in 0..2 {
            let q = &b.qs[32 * n..];
            let mut shift = 0;
            for _ in 0..4 {
                for half in 0..2 {
                    let dl = d_all * f32::from(i16::from(sc[is]) - 32);
                    is += 1;
                    for l in 0..16 {
                        let idx = l + 16 * half;
                        let q2 = ((q[idx] >> shift) & 3) as i8;
                        let sub = if b.hmask[idx] & m != 0 { 0 } else { 4 };
                        y[yi] = dl * f32::from(q2 - sub);
                        yi += 1;
                    }
                }
                shift += 2;
                m <<= 1;
            }
        }
        y
    }

    fn random_block(r: &mut XorShift32) -> BlockQ3K {
        let mut bytes = [0u8; BLOCK_BYTES];
        bytes.iter_mut().for_each(|b| *b = r.byte());
        bytes[108..110].copy_from_slice(&f32_to_f16(r.range(-4e-3, 4e-3)).to_le_bytes());
        BlockQ3K::from_bytes(&bytes)
    }

    #[test]
    fn dequant_equals_ggml_transcription_on_random_blocks() {
        let mut r = XorShift32::new(12345);
        for _ in 0..3000 {
            let b = random_block(&mut r);
            let s = ggml_scales(&b.scales);
            for (is, &v) in s.iter().enumerate() {
                assert_eq!(b.scale(is), i32::from(v) - 32);
            }
            assert_eq!(b.dequantize(), ggml_dequant(&b));
        }
    }

    #[test]
    fn hand_built_block_decodes_as_specified() {
        let mut b = BlockQ3K {
            hmask: [0; 32],
            qs: [0; 64],
            scales: [0; 12],
            d: f32_to_f16(0.5).to_le_bytes(),
        };
        // Element 128·1 + 32·2 + 16·1 + 3 = 211: n=1, j=2, h=1, l=3, sub-block is = 13.
        b.qs[32 + 16 + 3] = 0b11 << 4; // q2 = 3
        b.hmask[16 + 3] = 1 << 6; // high bit set: no −4
        b.scales[13 - 8] = 0x5 << 4; // lo4 = 5
        b.scales[8 + 1] = 0b10 << 6; // hi2 = 2 (is/4 = 3)
        let y = b.dequantize();
        assert_eq!(b.scale(13), (5 | 2 << 4) - 32);
        assert_eq!(y[211], 0.5 * 5.0 * 3.0);
        // Element 0: q2 = 0, high bit clear → q = −4, scale 0 − 32.
        assert_eq!(y[0], 0.5 * -32.0 * -4.0);
    }

    #[test]
    fn f16_conversions_round_to_nearest_even() {
        assert_eq!(f32_to_f16(1.0), 0x3C00);
        assert_eq!(f32_to_f16(-2.0), 0xC000);
        assert_eq!(f32_to_f16(65504.0), 0x7BFF);
        assert_eq!(f32_to_f16(65520.0), 0x7C00);
        assert_eq!(
            f32_to_f16(1.0 + 2f32.powi(-11)),
            0x3C00,
            "tie to even (down)"
        );
        assert_eq!(
            f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)),
            0x3C02,
            "tie to even (up)"
        );
        assert_eq!(f32_to_f16(2f32.powi(-24)), 0x0001, "smallest subnormal");
        assert_eq!(f32_to_f16(2f32.powi(-26)), 0x0000);
        for bits in 0u16..0x7C00 {
            let x = f16_to_f32(bits);
            assert_eq!(f32_to_f16(x), bits, "round trip of {bits:#06x}");
            assert_eq!(f32_to_f16(-x), bits | 0x8000);
        }
        assert_eq!(f16_to_f32(0x3555), 0.333_251_95);
    }

    #[test]
    fn matvec_is_the_dequantised_dot() {
        let mut r = XorShift32::new(7);
        let blocks: Vec<u8> = (0..8)
            .flat_map(|_| random_block(&mut r).to_bytes())
            .collect();
        let x = r.range_vec(512, -1.0, 1.0);
        let w = dequantize(&blocks);
        let out = matvec(&blocks, &x);
        assert_eq!(out.len(), 4);
        for (row, &o) in out.iter().enumerate() {
            let naive: f32 = (0..512).map(|c| w[row * 512 + c] * x[c]).sum();
            assert!(
                (o - naive).abs() <= 1e-5 * (1.0 + o.abs()),
                "row {row}: {o} vs {naive}"
            );
        }
    }
}
