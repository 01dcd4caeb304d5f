//! What differs between ONNX Runtime 1.31's CPU kernels from one ISA profile to the next, as one
//! value per profile. The values are built the way MLAS builds its platform table
//! (`mlas/lib/platform.cpp`): the generic x86-64 kernels first, then each ISA plugs in the
//! kernels it replaces. The kernel models read these fields; none of them matches on an [`Isa`].
//!
//! | field | generic (x86-sse2) | plugged by |
//! |---|---|---|
//! | [`Arith::gemm`] | widening | x86-avx2: int16 pairs (`vpmaddubsw`); x86-avx512vnni: widening again (`vpdpbusd`) |
//! | [`Arith::convert`] | `cvtps2dq` after a clamp | arm64-neon: `fcvtns` (saturating, NaN → 0) |
//! | [`Arith::add`] | SSE2 QLinearAdd | x86-avx2: two-FMA; arm64-neon: fixed point |
//! | [`Arith::add_builds`], [`Arith::mul_builds`] | no contraction | the compilers' FMA contractions per ISA |
//! | [`Arith::int8_activations`] | no | arm64-neon: the QDQ selectors fuse int8 activations |
//! | [`Arith::logistic_uniform`] | yes | arm64-neon: no (FMA body, compiler-dependent tail) |

use crate::Isa;
use crate::binary::{Contractions, Fused};

/// How a u8×s8 GEMM sums its products before the int32 accumulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gemm {
    /// Every product widened to int32 (or paired without saturation): exact.
    Widening,
    /// Adjacent u8×s8 products summed in int16 with saturation (`vpmaddubsw`), except depthwise
    /// kernels, which widen.
    PairSaturating,
}

/// How a float becomes an integer in requantization and in the float pooling and softmax kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Convert {
    /// Clamp to the code range in float (`maxps`/`minps`, NaN takes the lower bound), then
    /// `cvtps2dq` (ties to even).
    X86,
    /// `fcvtns` (ties to even, saturating, NaN → 0), then saturating narrows.
    Arm,
}

/// Which QLinearAdd kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddKernel {
    /// Raw codes against a folded `Fixed` offset, multiply then add.
    Sse2,
    /// The same with two FMAs (`MlasQLinearAddKernelAvx2Helper`).
    Avx2,
    /// Fixed point with ties away from zero, a raw float fallback out of range.
    NeonFixed,
}

/// The arithmetic of one profile's kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arith {
    pub gemm: Gemm,
    pub convert: Convert,
    pub add: AddKernel,
    /// The compiled builds of QLinearAdd a proof must cover (on x86 the first is the Linux
    /// wheel's, the one the differential tests run).
    pub add_builds: &'static [Contractions],
    /// The compiled builds of QLinearMul a proof must cover.
    pub mul_builds: &'static [Contractions],
    /// Whether the QDQ selectors fuse groups on int8 activations by default
    /// (`session.qdqisint8allowed`, on for ARM only).
    pub int8_activations: bool,
    /// Whether MLAS's float logistic kernel computes every element the same way (x86: the FMA3
    /// assembly masks its tails, SSE2 never contracts; arm64: an FMA vector body and a scalar
    /// tail only some compilers contract).
    pub logistic_uniform: bool,
}

const PLAIN: Contractions = Contractions { fixed: None, scalar_fixed: false, raw: None, mul: false };

/// Baseline x86-64: SSE2 elementwise kernels, compiled without FMA; GEMMs widen (SSE2's U8S8
/// kernel unpacks to int16 and uses `pmaddwd` on pairs of widened products).
const fn generic() -> Arith {
    Arith {
        gemm: Gemm::Widening,
        convert: Convert::X86,
        add: AddKernel::Sse2,
        add_builds: &[PLAIN],
        mul_builds: &[PLAIN],
        int8_activations: false,
        logistic_uniform: true,
    }
}

/// AVX2 + FMA: the two-FMA QLinearAdd (GCC contracts `Fixed` and the scalar path, clang only
/// `Fixed`, MSVC nothing), QLinearMul's intrinsics uncontracted, u8×s8 pairs in int16.
const fn plug_avx2(mut a: Arith) -> Arith {
    a.gemm = Gemm::PairSaturating;
    a.add = AddKernel::Avx2;
    a.add_builds = &[Contractions::GCC_X86_AVX2, Contractions::CLANG_X86_AVX2, PLAIN];
    a
}

/// AVX-512 VNNI (or AVX-VNNI): the AVX2 elementwise kernels, `vpdpbusd` accumulates every
/// product exactly.
const fn plug_vnni(mut a: Arith) -> Arith {
    a.gemm = Gemm::Widening;
    a
}

/// ARM64 NEON: `fcvtns` conversions, fixed-point QLinearAdd; GCC may contract either product of
/// the raw fallback and QLinearMul's multiply and add, clang neither.
const fn plug_neon(mut a: Arith) -> Arith {
    a.convert = Convert::Arm;
    a.add = AddKernel::NeonFixed;
    a.add_builds = &[PLAIN, Contractions { raw: Some(Fused::A), ..PLAIN }, Contractions { raw: Some(Fused::B), ..PLAIN }];
    a.mul_builds = &[PLAIN, Contractions { mul: true, ..PLAIN }];
    a.int8_activations = true;
    a.logistic_uniform = false;
    a
}

static X86_SSE2: Arith = generic();
static X86_AVX2: Arith = plug_avx2(generic());
static X86_AVX512VNNI: Arith = plug_vnni(plug_avx2(generic()));
static ARM64_NEON: Arith = plug_neon(generic());

impl Isa {
    /// This profile's kernel arithmetic.
    pub fn arith(self) -> &'static Arith {
        match self {
            Isa::X86Sse2 => &X86_SSE2,
            Isa::X86Avx2 => &X86_AVX2,
            Isa::X86Avx512Vnni => &X86_AVX512VNNI,
            Isa::Arm64Neon => &ARM64_NEON,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vnni_shares_avx2_elementwise_kernels_but_widens() {
        let (avx2, vnni) = (Isa::X86Avx2.arith(), Isa::X86Avx512Vnni.arith());
        assert_eq!(Arith { gemm: Gemm::PairSaturating, ..*vnni }, *avx2);
        assert_eq!(vnni.gemm, Gemm::Widening);
    }

    #[test]
    fn only_arm_converts_with_fcvtns_and_fuses_int8_activations() {
        for isa in Isa::ALL {
            assert_eq!(isa.arith().convert == Convert::Arm, !isa.is_x86(), "{isa}");
            assert_eq!(isa.arith().int8_activations, !isa.is_x86(), "{isa}");
        }
    }
}
