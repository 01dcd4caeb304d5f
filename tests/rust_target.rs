//! The Rust target (`Target::Rust`, contract §3.12) through the library facade: the same rules and
//! extraction, the Rust kernels' proofs. Until the Rust code generator lands, `compile_model`
//! gives the lowered form and the path-to-path compile refuses the target.

use qdqc::{CompileOptions, CompileReport, Contract, ErrorKind, Model, RustTarget, Target};
use std::path::Path;

const MODEL: &str = "examples/models/cnn_residual_qdq.onnx";

fn rust(contract: Contract) -> CompileOptions {
    CompileOptions { contract, target: Target::Rust(RustTarget::generic()), ..CompileOptions::default() }
}

fn compile(contract: Contract) -> CompileReport {
    let model = Model::load(Path::new(MODEL)).unwrap();
    qdqc::compile_model(&model, &rust(contract)).unwrap().report
}

/// The op a group's rule fuses, for the families the Rust target must cover.
fn family(rule: &str) -> Option<&'static str> {
    match rule {
        "qlinear-conv" | "qlinear-conv-bias" => Some("Conv"),
        "qlinear-add" | "qlinear-mul" => Some("Add/Mul"),
        "qlinear-global-average-pool" | "qlinear-average-pool" => Some("pool"),
        _ => None,
    }
}

/// Under `real` every Conv/Add/pool group fuses — `r3` too, whose authored bias is off the
/// accumulator's scale (`b·sb ≠ b·sx·sw`): the kernels add it as its exact value
/// (`Ratio::with_bias`), which the proof names.
#[test]
fn under_real_every_conv_add_and_pool_group_of_cnn_residual_fires_for_rust() {
    let r = compile(Contract::Real);
    assert_eq!(r.target, "rust");
    assert_eq!(r.profiles.iter().map(|p| p.name()).collect::<Vec<_>>(), ["portable", "x86-avx2", "x86-avx512vnni"]);
    let mut seen = std::collections::BTreeMap::new();
    for d in r.decisions.iter().filter(|d| family(&d.rule).is_some()) {
        assert_eq!(d.verdict.len(), 3, "{d:?}");
        if d.output == "r3_QuantizeLinear_Output" {
            let proof = d.proof.values().next().unwrap();
            assert!(proof.detail.contains("16 bias(es) off sx·sw added as exact offsets"), "{}", proof.detail);
        }
        assert!(d.fired && d.verdict.values().all(|v| *v == "exact"), "{} {}: {:?} {:?}", d.rule, d.output, d.verdict, d.reason);
        // The Rust cost model prices an integer kernel below its float group: extraction picks it.
        assert!(!d.kept_unfused, "{} {}: proven but not extracted", d.rule, d.output);
        *seen.entry(family(&d.rule).unwrap()).or_insert(0) += 1;
    }
    assert_eq!(seen, [("Add/Mul", 1), ("Conv", 3), ("pool", 2)].into_iter().collect(), "{seen:?}");
    let groups: Vec<&str> = r.undecided.iter().map(|g| g.op.as_str()).collect();
    assert!(!groups.iter().any(|op| ["Conv", "Add", "GlobalAveragePool", "AveragePool"].contains(op)), "undecided: {groups:?}");
}

#[test]
fn under_exact_the_rust_target_fires_only_proven_groups_and_says_why_the_rest_stay_float() {
    let r = compile(Contract::Exact);
    for d in r.decisions.iter().filter(|d| family(&d.rule).is_some()) {
        let all_exact = d.verdict.values().all(|v| *v == "exact");
        assert_eq!(d.fired, all_exact, "{d:?}");
        if !d.fired {
            assert!(!d.reason.is_empty() || !d.counterexample.is_empty(), "a refusal says why: {d:?}");
        }
    }
}

#[test]
fn the_onnx_writer_refuses_the_rust_target_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.onnx");
    let err = qdqc::compile(Path::new(MODEL), &out, &rust(Contract::Real)).unwrap_err();
    assert_eq!(err.kind, ErrorKind::BadInput);
    assert!(err.to_string().contains("the Rust target writes a crate"), "{err}");
    assert!(!out.exists());
}

#[test]
fn the_crate_writer_refuses_the_ort_target_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("crate");
    let err = qdqc::compile_rust(Path::new(MODEL), &out, None, &qdqc::CompileOptions::default()).unwrap_err();
    assert_eq!(err.kind, ErrorKind::BadInput);
    assert!(err.to_string().contains("compile_rust needs the Rust target"), "{err}");
    assert!(!out.exists());
}

/// `--weights file` through the build-step module: the module maps `OUT_DIR/NAME.weights.bin`
/// (no `include_bytes!`, no absolute path), and the weights it returns carry the header that
/// names this compile (`qdqc_kernels::weights`).
#[test]
fn a_module_with_its_weights_beside_maps_them_from_out_dir() {
    let file = CompileOptions { rust_weights: qdqc::RustWeights::File, ..rust(Contract::Real) };
    let (text, weights, _) = qdqc::compile_rust_module(Path::new(MODEL), "cnn", &file).unwrap();
    assert!(!text.contains("include_bytes!"), "{text}");
    assert!(text.contains(r#"pub const WEIGHTS_FILE: &str = concat!(env!("OUT_DIR"), "/cnn.weights.bin");"#), "{text}");
    assert!(text.contains("pub fn from_weights_file(path: &std::path::Path)"));
    let (embedded_text, embedded, _) = qdqc::compile_rust_module(Path::new(MODEL), "cnn", &rust(Contract::Real)).unwrap();
    assert!(embedded_text.contains("include_bytes!(concat!(env!(\"OUT_DIR\"), \"/cnn.weights.bin\"))"));
    assert_eq!(&weights[..16], b"qdqc weights v1\0");
    assert_eq!(&weights[64..], &embedded[..], "the same weights after the 64-byte header");
}
