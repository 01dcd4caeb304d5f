//! The exact U8U8 form of an s8-weight Conv/MatMul/Gemm group: the fused kernel reads the weights
//! as uint8 codes `w + 128` with zero points `zw + 128`, so that ORT runs its u8×u8 kernels,
//! which never saturate, where its u8×s8 kernel on x86 without VNNI (`vpmaddubsw`) saturates
//! pairs of products to int16. ONNX Runtime's own `session.x64quantprecision=1`
//! (Avx2WeightS8ToU8Transformer) does the same at session creation, but only at
//! ORT_ENABLE_EXTENDED and above, on hosts where MLAS reports u8×s8 overflow, and only for
//! weights outside [−64, 64]: under ORT_DISABLE_ALL, the unfused reference's profile, it does not
//! run (docs/u8u8-weights.md). Emitting the uint8 weights holds under every level.
//!
//! Obligation (contract §5.9, the same as the int8-weight form of §5.8):
//! `requant::prove` of the shifted group on every selected ISA, under the options' contract
//! (`real`: also the synthesis). The accumulator is unchanged, `(w + 128) − (zw + 128) = w − zw`
//! for every weight, so every accumulator the int8-weight group reaches is reached by the same
//! inputs, and the proof reads the shifted group's own kernel on each ISA.
//!
//! | condition | why |
//! |---|---|
//! | uint8 activations, int8 weights | ORT has no QLinearConv/QLinearMatMul/QGemm for int8 activations with uint8 weights; uint8 × uint8 it has on every ISA |
//! | `x86-avx2` is selected and the int8-weight form is not proven on every selected ISA | the shifted form runs 2.5–4x slower than u8×s8 on a VNNI host (bench/u8u8.py); it is only worth its cost where it replaces the unfused group |
//! | not depthwise, and some weight pair of some channel can leave int16 on x86-avx2 | otherwise the int8-weight form accumulates exactly there too and the shift changes nothing the proof sees (ORT's depthwise kernels widen every product) |
//! | every weight zero point in int8 | `zw + 128` is then a uint8 code |
//! | the shifted group proven on every selected ISA | MLAS runs u8×u8 exactly: SSE2 and AVX2 widen to int16 and sum with `pmaddwd` (no two products can leave int32), AVX-512/AVX VNNI flip B back to int8 (`MlasGemmU8S8DispatchAvx2`, `vpdpbusd`), NEON widens (`MlasGemmU8X8DispatchNeon`); `requant::accumulate` models each as exact |
//!
//! Broken twin: `tests/broken` "u8_weights_zero_point_unshifted" (codes shifted, zero point kept).

use qdqc_exact::reference::CodeType;
use qdqc_ort::Isa;
use qdqc_ort::requant::{GemmGroup, avx2_pair_overflow};

/// The offset from int8 to uint8 codes.
pub const SHIFT: i64 = 128;

/// Whether the shifted form is worth trying for `g` once its int8-weight form is not proven.
pub fn applies(g: &GemmGroup, isas: &[Isa]) -> bool {
    g.x.code == CodeType::U8
        && g.w_code == CodeType::I8
        && isas.iter().any(|&isa| g.pairs_saturate(isa))
        && (0..g.channels()).any(|c| avx2_pair_overflow(g, c).is_some())
        && g.w_zero_points.iter().all(|&z| (-128..=127).contains(&z))
}

/// The same group with uint8 weights `w + 128` and zero points `zw + 128`.
pub fn shift(g: &GemmGroup) -> GemmGroup {
    GemmGroup {
        w_code: CodeType::U8,
        weights: g.weights.iter().map(|row| row.iter().map(|w| w + SHIFT).collect()).collect(),
        w_zero_points: g.w_zero_points.iter().map(|z| z + SHIFT).collect(),
        ..g.clone()
    }
}

/// The rule name a decision on the shifted form is logged under.
pub fn rule_name(rule: &str) -> &'static str {
    match rule {
        "qlinear-conv" => "qlinear-conv-u8-weights",
        "qlinear-conv-bias" => "qlinear-conv-bias-u8-weights",
        "qlinear-matmul" => "qlinear-matmul-u8-weights",
        "qgemm" => "qgemm-u8-weights",
        "qgemm-bias" => "qgemm-bias-u8-weights",
        other => unreachable!("no uint8-weight form of rule {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qdqc_exact::{Contract, QParam};
    use qdqc_ort::requant::{GemmKind, accumulate, prove};

    fn saturating() -> GemmGroup {
        let u8q = |s: f32| QParam::new(s, 128, CodeType::U8);
        let w = vec![vec![127, 120, -3, 5], vec![-128, -100, 7, 1]];
        GemmGroup::new(GemmKind::MatMul, u8q(2f32.powi(-7)), CodeType::I8, w, vec![2f32.powi(-6)], vec![0], u8q(2f32.powi(-3)))
    }

    #[test]
    fn the_shifted_group_has_the_same_accumulators_and_no_saturation() {
        let (g, u) = (saturating(), shift(&saturating()));
        assert!(applies(&g, &Isa::ALL) && !applies(&u, &Isa::ALL));
        assert!(!applies(&g, &[Isa::X86Avx512Vnni, Isa::Arm64Neon]), "not needed without x86-avx2");
        let x = [255, 255, 0, 17];
        assert_ne!(accumulate(&g, 0, &x, Isa::X86Avx2), accumulate(&g, 0, &x, Isa::X86Avx512Vnni), "the int8 pair saturates");
        for isa in Isa::ALL {
            for c in 0..2 {
                assert_eq!(accumulate(&u, c, &x, isa), accumulate(&g, c, &x, Isa::X86Avx512Vnni), "{isa} channel {c}");
            }
        }
        assert!(!prove(&g, Isa::X86Avx2, Contract::Exact).is_exact());
        for isa in Isa::ALL {
            assert!(prove(&u, isa, Contract::Exact).is_exact(), "{isa}");
        }
    }
}
