//! Element conversions between f32 and the ggml types skyctl writes: F32, F16, BF16, Q8_0.

use crate::error::{Error, Result};
use crate::types::GgmlType;

/// Values per Q8_0 block.
pub const QK8_0: usize = 32;
/// Bytes per Q8_0 block: one f16 scale + 32 signed bytes.
pub const Q8_0_BLOCK_BYTES: usize = 34;

/// f32 -> IEEE half, rounding to nearest even (as numpy, torch and the `half` crate do).
/// Overflow gives ±inf, NaN stays NaN (quiet), tiny values become subnormals or ±0.
pub fn f32_to_f16(value: f32) -> u16 {
    let x = value.to_bits();
    let sign = (x >> 16) & 0x8000;
    let exp = x & 0x7F80_0000;
    let man = x & 0x007F_FFFF;
    if exp == 0x7F80_0000 {
        // Inf stays inf; NaN keeps its top payload bits and is forced quiet so it cannot
        // collapse into inf.
        let nan_bit = if man == 0 { 0 } else { 0x0200 };
        return (sign | 0x7C00 | nan_bit | (man >> 13)) as u16;
    }
    let half_exp = ((exp >> 23) as i32) - 127 + 15;
    if half_exp >= 0x1F {
        return (sign | 0x7C00) as u16;
    }
    if half_exp <= 0 {
        // Result is subnormal (or zero): shift the mantissa with its implicit bit in.
        if 14 - half_exp > 24 {
            return sign as u16;
        }
        let man = man | 0x0080_0000;
        let shift = (14 - half_exp) as u32;
        let mut half_man = man >> shift;
        let round_bit = 1u32 << (shift - 1);
        // Round up if above half, or exactly half and the kept part is odd.
        if (man & round_bit) != 0 && (man & (3 * round_bit - 1)) != 0 {
            half_man += 1;
        }
        return (sign | half_man) as u16;
    }
    let base = sign | ((half_exp as u32) << 10) | (man >> 13);
    let round_bit = 0x0000_1000u32;
    // A carry out of the mantissa correctly bumps the exponent (up to inf).
    if (man & round_bit) != 0 && (man & (3 * round_bit - 1)) != 0 {
        (base + 1) as u16
    } else {
        base as u16
    }
}

/// IEEE half -> f32 (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1F);
    let man = u32::from(h & 0x03FF);
    match exp {
        0 => {
            // Zero or subnormal: man * 2^-24, exact in f32.
            let v = man as f32 * (1.0 / 16_777_216.0);
            f32::from_bits(v.to_bits() | sign)
        }
        0x1F => f32::from_bits(sign | 0x7F80_0000 | (man << 13)),
        _ => f32::from_bits(sign | ((exp + 112) << 23) | (man << 13)),
    }
}

/// f32 -> bfloat16, rounding to nearest even; NaN stays NaN (quiet bit set), as ggml, torch
/// and gguf-py do.
pub fn f32_to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    if (b & 0x7FFF_FFFF) > 0x7F80_0000 {
        return ((b >> 16) | 0x0040) as u16;
    }
    let round = 0x7FFF + ((b >> 16) & 1);
    (b.wrapping_add(round) >> 16) as u16
}

/// bfloat16 -> f32 (exact).
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

fn check_blocks(what: &str, len: usize) -> Result<()> {
    if !len.is_multiple_of(QK8_0) {
        return Err(Error::NotBlockMultiple {
            what: what.to_string(),
            len: len as u64,
            block: QK8_0 as u64,
            ty: "Q8_0".into(),
        });
    }
    Ok(())
}

/// `y.round()` (halves away from zero) clamped to i8, without a libm call so the loop
/// vectorizes. A non-finite `y` (only when d is so tiny that 1/d overflows) gives 0, as
/// ggml's C cast and numpy's astype(int8) do on x86.
#[inline(always)]
fn round_to_i8(y: f32) -> i8 {
    if !y.is_finite() {
        return 0;
    }
    // Truncation toward zero (limited so the +-1 below cannot overflow); for |y| < 256
    // the fraction y - t is exact, and beyond that only its sign matters.
    let t = (y as i32).clamp(-256, 256);
    let frac = y - t as f32;
    let r = t + i32::from(frac >= 0.5) - i32::from(frac <= -0.5);
    r.clamp(-128, 127) as i8
}

/// Q8_0-quantize `x` (a multiple of 32 values) into `out` (34 bytes per 32 values), exactly
/// as ggml's `quantize_row_q8_0_ref`: d = max|x| / 127 stored as f16, q = round(x / d) with
/// halves away from zero, clamped to [-128, 127].
pub fn quantize_q8_0_into(x: &[f32], out: &mut [u8]) -> Result<()> {
    check_blocks("Q8_0 quantization", x.len())?;
    let expected = x.len() / QK8_0 * Q8_0_BLOCK_BYTES;
    if out.len() != expected {
        return Err(Error::LengthMismatch {
            what: "Q8_0 output buffer".into(),
            expected: expected as u64,
            actual: out.len() as u64,
        });
    }
    for (blk, dst) in x
        .chunks_exact(QK8_0)
        .zip(out.chunks_exact_mut(Q8_0_BLOCK_BYTES))
    {
        let amax = blk.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        dst[..2].copy_from_slice(&f32_to_f16(d).to_le_bytes());
        for (q, &v) in dst[2..].iter_mut().zip(blk) {
            *q = round_to_i8(v * id) as u8;
        }
    }
    Ok(())
}

/// Q8_0-quantize `x` (a multiple of 32 values); see [`quantize_q8_0_into`].
pub fn quantize_q8_0(x: &[f32]) -> Result<Vec<u8>> {
    check_blocks("Q8_0 quantization", x.len())?;
    let mut out = vec![0u8; x.len() / QK8_0 * Q8_0_BLOCK_BYTES];
    quantize_q8_0_into(x, &mut out)?;
    Ok(out)
}

/// Dequantize `n` values (a multiple of 32) from Q8_0 bytes: x = d * q.
pub fn dequantize_q8_0(bytes: &[u8], n: usize) -> Result<Vec<f32>> {
    check_blocks("Q8_0 dequantization", n)?;
    let expected = n / QK8_0 * Q8_0_BLOCK_BYTES;
    if bytes.len() != expected {
        return Err(Error::LengthMismatch {
            what: format!("Q8_0 data of {n} values"),
            expected: expected as u64,
            actual: bytes.len() as u64,
        });
    }
    let mut out = Vec::with_capacity(n);
    for blk in bytes.chunks_exact(Q8_0_BLOCK_BYTES) {
        let d = f16_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
        out.extend(blk[2..].iter().map(|&q| d * f32::from(q as i8)));
    }
    Ok(out)
}

/// Convert every value into a preallocated buffer (faster than collecting a flat_map).
fn map_into<const N: usize>(x: &[f32], f: impl Fn(f32) -> [u8; N]) -> Vec<u8> {
    let mut out = vec![0u8; x.len() * N];
    for (o, &v) in out.chunks_exact_mut(N).zip(x) {
        o.copy_from_slice(&f(v));
    }
    out
}

/// Check that every value of `tensor` survives encoding as `ty` finite: the one check every
/// writer (GGUF files, quantized files, the engine's weights) runs before it writes or uses a
/// tensor. F32: the value itself is finite. F16 and BF16: it stays finite after rounding
/// (f16 max 65504, so 65520 and above round to inf; bf16's largest finite value is
/// 3.3895314e38). Q8_0: the values are finite and each block's scale `d = amax / 127`
/// (computed as [`quantize_q8_0`] computes it) stays finite as f16 (`amax` below 8,321,040).
/// Other types have no f32 encoding and pass (their encoder refuses them).
///
/// Errors: [`Error::NotFinite`] naming `tensor` and the flat index of the first bad value
/// (for a Q8_0 scale: of the block's largest value).
pub fn check_finite_in(ty: GgmlType, tensor: &str, x: &[f32]) -> Result<()> {
    let refuse = |index: usize, reason: String| {
        Err(Error::NotFinite {
            tensor: tensor.to_string(),
            index,
            value: x[index],
            reason,
        })
    };
    if let Some(i) = x.iter().position(|v| !v.is_finite()) {
        return refuse(i, "is not finite".into());
    }
    match ty {
        GgmlType::F16 => {
            if let Some(i) = x
                .iter()
                .position(|&v| !f16_to_f32(f32_to_f16(v)).is_finite())
            {
                return refuse(i, "overflows F16 to inf (largest finite F16: 65504)".into());
            }
        }
        GgmlType::BF16 => {
            if let Some(i) = x
                .iter()
                .position(|&v| !bf16_to_f32(f32_to_bf16(v)).is_finite())
            {
                return refuse(
                    i,
                    "overflows BF16 to inf (largest finite BF16: 3.3895314e38)".into(),
                );
            }
        }
        GgmlType::Q8_0 => {
            for (b, blk) in x.chunks(QK8_0).enumerate() {
                let (at, amax) = blk.iter().enumerate().fold((0, 0.0f32), |(j, m), (i, v)| {
                    if v.abs() > m {
                        (i, v.abs())
                    } else {
                        (j, m)
                    }
                });
                let d = amax / 127.0;
                if !f16_to_f32(f32_to_f16(d)).is_finite() {
                    return refuse(
                        b * QK8_0 + at,
                        format!(
                            "makes the F16 scale of Q8_0 block {b} (max |x| / 127 = {d:e}) overflow to inf (largest finite F16: 65504)"
                        ),
                    );
                }
            }
        }
        GgmlType::F32 | GgmlType::Other(_) => {}
    }
    Ok(())
}

/// Encode f32 values as `ty`. `row_len` is the innermost dimension (ggml `ne[0]`); Q8_0
/// needs it to be a multiple of 32 (and `x.len()` a multiple of it).
pub fn encode(ty: GgmlType, x: &[f32], row_len: usize) -> Result<Vec<u8>> {
    match ty {
        GgmlType::F32 => Ok(map_into(x, f32::to_le_bytes)),
        GgmlType::F16 => Ok(map_into(x, |v| f32_to_f16(v).to_le_bytes())),
        GgmlType::BF16 => Ok(map_into(x, |v| f32_to_bf16(v).to_le_bytes())),
        GgmlType::Q8_0 => {
            if !row_len.is_multiple_of(QK8_0) || row_len == 0 {
                return Err(Error::NotBlockMultiple {
                    what: "Q8_0 row".into(),
                    len: row_len as u64,
                    block: QK8_0 as u64,
                    ty: "Q8_0".into(),
                });
            }
            if !x.len().is_multiple_of(row_len) {
                return Err(Error::LengthMismatch {
                    what: format!("Q8_0 input of rows of {row_len} values"),
                    expected: (x.len() / row_len * row_len) as u64,
                    actual: x.len() as u64,
                });
            }
            quantize_q8_0(x)
        }
        GgmlType::Other(_) => Err(Error::NotConvertible {
            what: "encode".into(),
            ty: ty.name(),
        }),
    }
}

/// Decode `n` values of type `ty` from `bytes` (whose length must be exactly right).
pub fn decode(ty: GgmlType, bytes: &[u8], n: usize) -> Result<Vec<f32>> {
    let width = match ty {
        GgmlType::Q8_0 => return dequantize_q8_0(bytes, n),
        GgmlType::F32 => 4,
        GgmlType::F16 | GgmlType::BF16 => 2,
        GgmlType::Other(_) => {
            return Err(Error::NotConvertible {
                what: "decode".into(),
                ty: ty.name(),
            })
        }
    };
    let expected = (n as u64)
        .checked_mul(width)
        .ok_or_else(|| Error::Overflow {
            what: format!("{n} {ty} values"),
        })?;
    if bytes.len() as u64 != expected {
        return Err(Error::LengthMismatch {
            what: format!("{ty} data of {n} values"),
            expected,
            actual: bytes.len() as u64,
        });
    }
    Ok(match ty {
        GgmlType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        GgmlType::F16 => bytes
            .chunks_exact(2)
            .map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
            .collect(),
        _ => bytes
            .chunks_exact(2)
            .map(|c| bf16_to_f32(u16::from_le_bytes([c[0], c[1]])))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_all_bit_patterns_round_trip() {
        for h in 0..=u16::MAX {
            let f = f16_to_f32(h);
            let theirs = half::f16::from_bits(h).to_f32();
            if theirs.is_nan() {
                // `half` may quiet signalling NaNs via F16C; we keep the payload bits.
                assert!(f.is_nan() && f.is_sign_negative() == theirs.is_sign_negative());
            } else {
                assert_eq!(f.to_bits(), theirs.to_bits(), "{h:#06x}");
            }
            let back = f32_to_f16(f);
            if f.is_nan() {
                assert!(f16_to_f32(back).is_nan(), "{h:#06x}");
            } else {
                assert_eq!(back, h, "{h:#06x}");
            }
        }
    }

    #[test]
    fn f32_to_f16_matches_half_crate() {
        let mut specials: Vec<f32> = vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            65504.0,
            65519.99,
            65520.0,
            -65520.0,
            1e10,
            f32::MAX,
            f32::MIN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MIN_POSITIVE,
            1e-45,
            5.960_464_5e-8,
            2.980_232_2e-8,
            2.980_233e-8,
            8.940_697e-8,
            6.097_555e-5,
            6.103_515_6e-5,
            1.000_488_3,
            1.000_976_6,
            1.001_464_8,
            2049.0,
            2051.0,
            0.1,
            1.0 / 3.0,
        ];
        // A deterministic spread of bit patterns across the whole f32 range.
        let mut s = 0x1234_5678_9abc_def0u64;
        for _ in 0..200_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            specials.push(f32::from_bits((s >> 32) as u32));
        }
        for x in specials {
            let ours = f32_to_f16(x);
            let theirs = half::f16::from_f32(x).to_bits();
            if x.is_nan() {
                assert!(f16_to_f32(ours).is_nan(), "{:#x}", x.to_bits());
                assert_eq!(ours & 0x8000, theirs & 0x8000);
            } else {
                assert_eq!(ours, theirs, "x = {x:e} ({:#010x})", x.to_bits());
            }
        }
        assert_eq!(f32_to_f16(65520.0), 0x7C00);
        assert_eq!(f32_to_f16(-1e9), 0xFC00);
        assert_eq!(f32_to_f16(2.980_232_2e-8), 0x0000); // exactly half the smallest subnormal: to even (0)
        assert_eq!(f32_to_f16(8.940_697e-8), 0x0002); // 1.5 subnormal steps: to even (2)
        assert!(f16_to_f32(f32_to_f16(f32::from_bits(0x7F80_0001))).is_nan());
    }

    #[test]
    fn bf16_matches_half_crate_and_keeps_nan() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let x = f32::from_bits((s >> 32) as u32);
            let ours = f32_to_bf16(x);
            if x.is_nan() {
                assert!(bf16_to_f32(ours).is_nan());
                assert_ne!(ours & 0x0040, 0, "quiet bit");
            } else {
                assert_eq!(
                    ours,
                    half::bf16::from_f32(x).to_bits(),
                    "{:#010x}",
                    x.to_bits()
                );
            }
        }
        for h in 0..=u16::MAX {
            let f = bf16_to_f32(h);
            if !f.is_nan() {
                assert_eq!(f32_to_bf16(f), h);
            }
        }
        assert!(bf16_to_f32(f32_to_bf16(f32::from_bits(0x7F80_0001))).is_nan());
        assert_eq!(f32_to_bf16(f32::MAX), 0x7F80); // rounds up to inf
    }

    #[test]
    fn q8_0_known_block() {
        let mut x = [0.0f32; 32];
        for (i, v) in x.iter_mut().enumerate() {
            *v = i as f32 - 16.0;
        }
        let q = quantize_q8_0(&x).unwrap();
        assert_eq!(q.len(), 34);
        let d = 16.0f32 / 127.0;
        assert_eq!(u16::from_le_bytes([q[0], q[1]]), f32_to_f16(d));
        assert_eq!(q[2] as i8, -127);
        assert_eq!(q[2 + 16] as i8, 0);
        // 1 / d * 1 = 7.9375 -> 8
        assert_eq!(q[2 + 17] as i8, 8);
        let back = dequantize_q8_0(&q, 32).unwrap();
        for (a, b) in x.iter().zip(&back) {
            assert!((a - b).abs() <= d * 0.51 + 1e-3, "{a} vs {b}");
        }
        assert_eq!(quantize_q8_0(&[0.0; 32]).unwrap(), vec![0u8; 34]);
    }

    #[test]
    fn round_to_i8_matches_round_and_clamp() {
        let mut s = 0x1234_5678u64;
        let mut cases: Vec<f32> = vec![
            0.5,
            -0.5,
            1.5,
            -1.5,
            2.5,
            126.5,
            127.49,
            127.5,
            -128.5,
            -127.5,
            0.499_999_97,
            -0.499_999_97,
            1e9,
            -1e9,
            3e38,
            8_388_607.5,
            0.0,
            -0.0,
        ];
        for _ in 0..200_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            cases.push(((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 300.0);
            cases.push((s >> 50) as f32 * 0.5 - 4096.0);
        }
        for y in cases {
            let want = (y.round() as i32).clamp(-128, 127) as i8;
            assert_eq!(round_to_i8(y), want, "{y}");
        }
        assert_eq!(round_to_i8(f32::NAN), 0);
        assert_eq!(round_to_i8(f32::INFINITY), 0);
    }

    #[test]
    fn q8_0_tiny_scale_gives_zeros_like_ggml() {
        // d is so small that 1/d overflows to inf: ggml (and numpy) end with q = 0.
        let x: Vec<f32> = (0..32).map(|i| f32::MIN_POSITIVE * i as f32).collect();
        let q = quantize_q8_0(&x).unwrap();
        assert_eq!(&q[2..], &[0u8; 32]);
    }

    #[test]
    fn q8_0_refuses_partial_blocks() {
        let err = quantize_q8_0(&[1.0; 33]).unwrap_err();
        assert!(
            err.to_string()
                .contains("33 values do not split into blocks of 32"),
            "{err}"
        );
        assert!(encode(GgmlType::Q8_0, &[1.0; 96], 48).is_err());
        assert!(encode(GgmlType::Q8_0, &[1.0; 96], 32).is_ok());
        assert!(dequantize_q8_0(&[0; 33], 32).is_err());
    }

    fn refused(ty: GgmlType, x: &[f32]) -> String {
        match check_finite_in(ty, "blk.0.attn_qkv.weight", x) {
            Err(e) => e.to_string(),
            Ok(()) => panic!("{ty} accepted {x:?}"),
        }
    }

    #[test]
    fn check_finite_in_refuses_at_the_exact_boundaries() {
        let t = "blk.0.attn_qkv.weight";
        // F16: 65504 is the largest finite half; 65519.99 rounds down to it, 65520 to inf.
        for v in [65504.0f32, 65519.99, -65519.99] {
            check_finite_in(GgmlType::F16, t, &[0.0, v]).unwrap();
            assert!(f16_to_f32(f32_to_f16(v)).is_finite());
        }
        for v in [65520.0f32, -65520.0, 1e10] {
            let e = refused(GgmlType::F16, &[0.5, 1.0, v]);
            assert!(
                e.contains("\"blk.0.attn_qkv.weight\"")
                    && e.contains("flat index 2")
                    && e.contains("F16"),
                "{e}"
            );
            // The same value is fine in F32.
            check_finite_in(GgmlType::F32, t, &[v]).unwrap();
        }
        // BF16: 0x7F7F_7FFF rounds down to the largest finite bf16 (0x7F7F), the halfway
        // value 0x7F7F_8000 rounds to even, i.e. up to inf.
        let below = f32::from_bits(0x7F7F_7FFF);
        let half = f32::from_bits(0x7F7F_8000);
        check_finite_in(GgmlType::BF16, t, &[below, -below]).unwrap();
        assert_eq!(f32_to_bf16(below), 0x7F7F);
        assert_eq!(f32_to_bf16(half), 0x7F80);
        let e = refused(GgmlType::BF16, &[1.0, half]);
        assert!(e.contains("flat index 1") && e.contains("BF16"), "{e}");
        check_finite_in(GgmlType::F16, t, &[]).unwrap();
        // Q8_0: d = amax / 127 overflows f16 from amax = 65520 * 127 = 8,321,040 on.
        let mut blocks = vec![0.25f32; 64];
        blocks[40] = 8_321_000.0; // d = 65519.69 -> 65504
        check_finite_in(GgmlType::Q8_0, t, &blocks).unwrap();
        assert_ne!(f32_to_f16(8_321_000.0 / 127.0), 0x7C00);
        blocks[41] = -8_321_040.0;
        let e = refused(GgmlType::Q8_0, &blocks);
        assert!(
            e.contains("flat index 41") && e.contains("Q8_0 block 1") && e.contains("scale"),
            "{e}"
        );
        // What the quantizer would have written: an infinite scale.
        let q = quantize_q8_0(&blocks).unwrap();
        assert_eq!(u16::from_le_bytes([q[34], q[35]]), 0x7C00);
        // NaN and inf are refused in every type, F32 included.
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0] {
            let e = refused(ty, &[0.0, 0.0, 0.0, f32::NAN]);
            assert!(
                e.contains("flat index 3") && e.contains("NaN") && e.contains("not finite"),
                "{e}"
            );
            refused(ty, &[f32::NEG_INFINITY]);
        }
    }

    #[test]
    fn encode_decode_round_trip() {
        let x: Vec<f32> = (0..64).map(|i| (i as f32 - 20.5) * 0.25).collect();
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
            let b = encode(ty, &x, 64).unwrap();
            assert_eq!(decode(ty, &b, 64).unwrap(), x, "{ty}");
            assert!(decode(ty, &b[1..], 64).is_err());
        }
        assert!(encode(GgmlType::Other(12), &x, 64).is_err());
        assert!(decode(GgmlType::Other(12), &[], 0).is_err());
    }
}
