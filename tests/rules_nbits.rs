//! Both outcomes of the lossy MatMulNBits rules (`rewrites/src/rules/nbits.rs`) on tiny models
//! built in code: every bit width, signedness, layout and zero-point case fuses, and the
//! MatMulNBits the output model holds dequantizes back to the authored weights; every named
//! condition refuses with its reason; nothing is lossy without `--allow`; shared weights are
//! packed once and unread initializers pruned.

mod common;

use common::*;
use qdqc::{AccuracyLevel, Allow, CompileOptions, CompileReport};
use qdqc_lang::Model;
use qdqc_lang::attr::{AttrValue, Attribute};
use qdqc_lang::onnx::{DataType, ModelProto, NodeProto, TensorProto};
use qdqc_ort::nbits::{Layout, Packed, Weight};
use std::path::Path;

/// A tensor of `dt` codes, packed as ONNX stores them (sub-byte types low bits first).
fn codes(name: &str, dt: DataType, dims: &[i64], vals: &[i64]) -> TensorProto {
    let bits = match dt {
        DataType::Int2 | DataType::Uint2 => 2,
        DataType::Int4 | DataType::Uint4 => 4,
        DataType::Uint16 => {
            let raw: Vec<u8> = vals.iter().flat_map(|&v| (v as u16).to_le_bytes()).collect();
            return TensorProto { name: Some(name.into()), dims: dims.to_vec(), data_type: Some(dt as i32), raw_data: Some(raw.into()), ..Default::default() };
        }
        _ => 8,
    };
    let per_byte = 8 / bits;
    let mut raw = vec![0u8; vals.len().div_ceil(per_byte)];
    for (i, v) in vals.iter().enumerate() {
        raw[i / per_byte] |= ((*v as u8) & ((1u16 << bits) - 1) as u8) << ((i % per_byte) * bits);
    }
    TensorProto { name: Some(name.into()), dims: dims.to_vec(), data_type: Some(dt as i32), raw_data: Some(raw.into()), ..Default::default() }
}

fn attr(mut n: NodeProto, a: Attribute) -> NodeProto {
    n.attribute.push(a.to_proto());
    n
}

fn float(name: &str, v: f32) -> Attribute {
    Attribute { name: name.into(), value: AttrValue::Float(v) }
}

/// One DQ(W) → MatMul/Gemm case.
#[derive(Clone)]
struct Case {
    dt: DataType,
    layout: Layout,
    zp: bool,
    k: usize,
    n: usize,
}

impl Case {
    fn range(&self) -> (i64, i64) {
        qdqc_lang::tensor::int_range(self.dt).unwrap()
    }

    fn params(&self) -> (Vec<i64>, usize) {
        match self.layout {
            Layout::PerTensor => (vec![], 1),
            Layout::PerChannel => (vec![self.n as i64], self.n),
            Layout::Blocked(bs) => (vec![self.k.div_ceil(bs) as i64, self.n as i64], self.k.div_ceil(bs) * self.n),
        }
    }

    fn weight(&self) -> Weight {
        let (lo, hi) = self.range();
        let span = hi - lo + 1;
        let (_, count) = self.params();
        Weight {
            k: self.k,
            n: self.n,
            bits: qdqc_exact::reference::CodeType::from_dtype(self.dt).unwrap().bits(),
            signed: lo < 0,
            layout: self.layout,
            codes: (0..self.k * self.n).map(|i| lo + (i as i64 * 5 + 1) % span).collect(),
            scales: (0..count).map(|i| 0.02 + i as f32 / 1024.0).collect(),
            zero_points: self.zp.then(|| (0..count).map(|i| lo + (i as i64 * 3 + 1) % span).collect()),
        }
    }

    /// `y = target(a, DQ(w)[, bias])`, with `extra` attributes on the target.
    fn model(&self, target: &str, bias: Option<&[i64]>, extra: Vec<Attribute>, a_dims: &[i64]) -> ModelProto {
        let w = self.weight();
        let (pdims, _) = self.params();
        let mut inits = vec![codes("w", self.dt, &[self.k as i64, self.n as i64], &w.codes), f32s("s", &pdims, &w.scales)];
        let mut dq_inputs = vec!["w", "s"];
        if let Some(z) = &w.zero_points {
            inits.push(codes("z", self.dt, &pdims, z));
            dq_inputs.push("z");
        }
        let mut dq = node("DequantizeLinear", "dq_w", &dq_inputs, &["wf"]);
        match self.layout {
            Layout::PerTensor => {}
            Layout::PerChannel => dq = attr(dq, Attribute::int("axis", 1)),
            Layout::Blocked(bs) => dq = attr(attr(dq, Attribute::int("axis", 0)), Attribute::int("block_size", bs as i64)),
        }
        let mut inputs = vec!["a", "wf"];
        if let Some(dims) = bias {
            inits.push(f32s("bias", dims, &vec![0.5; dims.iter().product::<i64>() as usize]));
            inputs.push("bias");
        }
        let mut mm = node(target, "mm", &inputs, &["y"]);
        for a in extra {
            mm = attr(mm, a);
        }
        let rows = if a_dims.len() > 1 { a_dims[0] } else { 1 };
        let y_dims: Vec<i64> = if a_dims.len() > 1 { vec![rows, self.n as i64] } else { vec![self.n as i64] };
        let opset = if matches!(self.dt, DataType::Int2 | DataType::Uint2) { 25 } else { 21 };
        let mut m = model(graph("g", vec![dq, mm], vec![value("a", F32, a_dims)], vec![value("y", F32, &y_dims)], inits), opset);
        m.ir_version = Some(if opset == 25 { 11 } else { 10 });
        m
    }
}

fn allow(level: AccuracyLevel) -> CompileOptions {
    CompileOptions { allow: Allow { matmulnbits: Some(level), ..Allow::default() }, ..CompileOptions::default() }
}

fn compile(dir: &Path, name: &str, m: &ModelProto, options: &CompileOptions) -> (CompileReport, ModelProto) {
    let input = write_model(dir, &format!("{name}.onnx"), m);
    let out = dir.join(format!("{name}.out.onnx"));
    let report = qdqc::compile(&input, &out, options).unwrap();
    (report, Model::load(&out).unwrap().proto)
}

/// The MatMulNBits of the output model, read back into a [`Packed`] from its initializers.
fn packed(m: &ModelProto) -> (NodeProto, Packed) {
    let g = m.graph.as_ref().unwrap();
    let node = g.node.iter().find(|n| n.op_type.as_deref() == Some("MatMulNBits")).expect("a MatMulNBits").clone();
    let int = |name: &str| node.attribute.iter().find(|a| a.name.as_deref() == Some(name)).and_then(|a| a.i).unwrap() as usize;
    let init = |name: &str| g.initializer.iter().find(|t| t.name.as_deref() == Some(name)).unwrap_or_else(|| panic!("initializer {name}"));
    let bytes = |t: &TensorProto| t.raw_data.as_ref().unwrap().to_vec();
    let (k, n, bits, bs) = (int("K"), int("N"), int("bits") as u32, int("block_size"));
    let b = init(&node.input[1]);
    assert_eq!(b.data_type, Some(DataType::Uint8 as i32));
    assert_eq!(b.dims, vec![n as i64, k.div_ceil(bs) as i64, (bs * bits as usize / 8) as i64]);
    let scales = bytes(init(&node.input[2])).chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    let zero_points = node.input.get(3).filter(|z| !z.is_empty()).map(|z| bytes(init(z)));
    (node.clone(), Packed { k, n, bits, block_size: bs, blocks: k.div_ceil(bs), b: bytes(b), scales, zero_points })
}

const TYPES: [DataType; 6] = [DataType::Int2, DataType::Uint2, DataType::Int4, DataType::Uint4, DataType::Int8, DataType::Uint8];

#[test]
fn every_width_signedness_layout_and_zero_point_case_fuses_and_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let mut fused = 0;
    for dt in TYPES {
        for layout in [Layout::PerTensor, Layout::PerChannel, Layout::Blocked(16), Layout::Blocked(64)] {
            for zp in [false, true] {
                for k in [20, 64] {
                    let case = Case { dt, layout, zp, k, n: 6 };
                    let (report, out) = compile(dir.path(), "m", &case.model("MatMul", None, vec![], &[2, k as i64]), &allow(AccuracyLevel::Acc1));
                    let what = format!("{dt:?} {layout:?} zp {zp} K {k}");
                    let [d] = &report.decisions[..] else { panic!("{what}: {:?}", report.decisions) };
                    assert!(d.fired, "{what}: {d:?}");
                    let lossy = d.lossy.as_ref().unwrap();
                    assert_eq!((lossy.contract, lossy.accuracy_level), ("lossy", AccuracyLevel::Acc1));
                    assert!(lossy.deviation[0].max_rel <= 1e-4, "{what}: acc1 {:?}", lossy.deviation);
                    let (node, p) = packed(&out);
                    let w = case.weight();
                    for kk in 0..k {
                        for n in 0..case.n {
                            let authored = (w.codes[kk * w.n + n] - w.zero_point(kk, n)) as f32
                                * w.scales[match layout {
                                    Layout::PerTensor => 0,
                                    Layout::PerChannel => n,
                                    Layout::Blocked(bs) => (kk / bs) * w.n + n,
                                }];
                            assert_eq!(p.dequantized(kk, n).to_bits(), authored.to_bits(), "{what}: W[{kk}, {n}]");
                        }
                    }
                    // Signed weights without zero point rely on MatMulNBits' default; unsigned
                    // ones carry explicit zeros.
                    assert_eq!(node.input.len(), if w.signed && !zp { 3 } else { 4 }, "{what}");
                    let out_graph = out.graph.as_ref().unwrap();
                    assert_eq!(out_graph.node.len(), 1, "{what}: DQ and MatMul replaced");
                    assert!(!out_graph.initializer.iter().any(|t| ["w", "s", "z"].contains(&t.name.as_deref().unwrap())), "{what}: unread initializers pruned");
                    fused += 1;
                }
            }
        }
    }
    assert_eq!(fused, 96);
}

#[test]
fn gemm_with_bias_fuses_with_the_bias_as_input_5() {
    let dir = tempfile::tempdir().unwrap();
    let case = Case { dt: DataType::Int4, layout: Layout::Blocked(16), zp: false, k: 32, n: 8 };
    let (report, out) =
        compile(dir.path(), "g", &case.model("Gemm", Some(&[8]), vec![float("alpha", 1.0), float("beta", 1.0)], &[3, 32]), &allow(AccuracyLevel::Acc4));
    assert!(report.decisions[0].fired, "{:?}", report.decisions);
    let (node, _) = packed(&out);
    assert_eq!(node.input, ["a", "w/qdqc_nbits_B_32x8_bs16", "s/qdqc_nbits_scales_32x8_bs16", "", "", "bias"]);
    let level = node.attribute.iter().find(|a| a.name.as_deref() == Some("accuracy_level")).unwrap().i;
    assert_eq!(level, Some(4));
}

#[test]
fn gemm_with_an_omitted_bias_fuses_without_one() {
    let dir = tempfile::tempdir().unwrap();
    let case = Case { dt: DataType::Uint8, layout: Layout::PerTensor, zp: true, k: 32, n: 8 };
    let mut m = case.model("Gemm", None, vec![], &[3, 32]);
    m.graph.as_mut().unwrap().node[1].input.push(String::new());
    let (report, out) = compile(dir.path(), "g", &m, &allow(AccuracyLevel::Acc1));
    assert!(report.decisions[0].fired, "{:?}", report.decisions);
    let (node, _) = packed(&out);
    assert_eq!(node.input.len(), 4, "A, B, scales, zero points: no bias input");
}

#[test]
fn each_condition_refuses_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let int4 = Case { dt: DataType::Int4, layout: Layout::Blocked(16), zp: true, k: 32, n: 8 };
    let mut sixteen = int4.clone();
    sixteen.dt = DataType::Uint16;
    sixteen.layout = Layout::PerTensor;
    let cases: Vec<(&str, ModelProto, &str)> = vec![
        ("transB", int4.model("Gemm", None, vec![Attribute::int("transB", 1)], &[3, 32]), "transB = 1"),
        ("transA", int4.model("Gemm", None, vec![Attribute::int("transA", 1)], &[32, 3]), "transA = 1"),
        ("alpha", int4.model("Gemm", None, vec![float("alpha", 0.5)], &[3, 32]), "alpha = 0.5"),
        ("beta", int4.model("Gemm", Some(&[8]), vec![float("beta", 2.0)], &[3, 32]), "beta = 2"),
        ("bias_shape", int4.model("Gemm", Some(&[3, 8]), vec![], &[3, 32]), "Gemm bias: shape Some([3, 8])"),
        ("uint16", sixteen.model("MatMul", None, vec![], &[3, 32]), "UINT16 codes"),
        (
            "output_dtype",
            {
                let mut m = int4.model("MatMul", None, vec![], &[3, 32]);
                let dq = m.graph.as_mut().unwrap().node.remove(0);
                m.graph.as_mut().unwrap().node.insert(0, attr(dq, Attribute::int("output_dtype", DataType::Float16 as i64)));
                m
            },
            "output_dtype 10 differs",
        ),
    ];
    for (name, m, reason) in cases {
        let (report, out) = compile(dir.path(), name, &m, &allow(AccuracyLevel::Acc1));
        let [d] = &report.decisions[..] else { panic!("{name}: {:?}", report.decisions) };
        assert!(!d.fired && d.lossy.is_none(), "{name}");
        assert!(d.reason.values().all(|r| r.contains(reason)), "{name}: {:?}", d.reason);
        assert!(!out.graph.unwrap().node.iter().any(|n| n.op_type.as_deref() == Some("MatMulNBits")), "{name}");
    }
}

#[test]
fn blocks_along_n_or_not_a_power_of_two_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let case = Case { dt: DataType::Uint4, layout: Layout::Blocked(16), zp: false, k: 32, n: 32 };
    let mut along_n = case.model("MatMul", None, vec![], &[2, 32]);
    let dq = &mut along_n.graph.as_mut().unwrap().node[0];
    dq.attribute[0] = Attribute::int("axis", 1).to_proto();
    let mut odd = case.model("MatMul", None, vec![], &[2, 32]);
    let g = odd.graph.as_mut().unwrap();
    g.node[0].attribute[1] = Attribute::int("block_size", 24).to_proto();
    g.initializer[1] = f32s("s", &[2, 32], &[0.5; 64]);
    for (name, m, reason) in [("along_n", along_n, "blocked along axis 1"), ("odd", odd, "block size 24 is not a power of two")] {
        let (report, _) = compile(dir.path(), name, &m, &allow(AccuracyLevel::Acc1));
        let d = &report.decisions[0];
        assert!(!d.fired && d.reason.values().all(|r| r.contains(reason)), "{name}: {:?}", d.reason);
    }
}

#[test]
fn nothing_lossy_without_allow() {
    let dir = tempfile::tempdir().unwrap();
    let case = Case { dt: DataType::Int4, layout: Layout::Blocked(16), zp: true, k: 32, n: 8 };
    let (report, out) = compile(dir.path(), "m", &case.model("MatMul", None, vec![], &[3, 32]), &CompileOptions::default());
    assert!(report.decisions.is_empty() && !report.rules.iter().any(|r| r.starts_with("matmulnbits")));
    let ops: Vec<_> = out.graph.unwrap().node.iter().map(|n| n.op_type.clone().unwrap()).collect();
    assert_eq!(ops, ["DequantizeLinear", "MatMul"]);
}

#[test]
fn consumers_of_a_shared_weight_share_its_packing() {
    let dir = tempfile::tempdir().unwrap();
    let case = Case { dt: DataType::Int8, layout: Layout::PerChannel, zp: true, k: 16, n: 4 };
    let mut m = case.model("MatMul", None, vec![], &[1, 16]);
    let g = m.graph.as_mut().unwrap();
    g.node.push(node("MatMul", "mm2", &["a2", "wf"], &["y2"]));
    g.node.push(attr(node("Gather", "embed", &["wf", "ids"], &["emb"]), Attribute::int("axis", 0)));
    g.input.extend([value("a2", F32, &[2, 16]), value("ids", 7, &[2])]);
    g.output.extend([value("y2", F32, &[2, 4]), value("emb", F32, &[2, 4])]);
    let (report, out) = compile(dir.path(), "shared", &m, &allow(AccuracyLevel::Acc4));
    assert_eq!(report.decisions.iter().filter(|d| d.fired && d.lossy.is_some()).count(), 2);
    // The embedding lookup takes the exact gather-before-dequantize rewrite beside them.
    assert!(report.decisions.iter().any(|d| d.fired && d.rule == "gather-before-dequantize"));
    let g = out.graph.unwrap();
    let b: Vec<&String> = g.node.iter().filter(|n| n.op_type.as_deref() == Some("MatMulNBits")).map(|n| &n.input[1]).collect();
    assert_eq!(b.len(), 2);
    assert_eq!(b[0], b[1], "one packed B for both consumers");
    let names: Vec<&str> = g.initializer.iter().map(|t| t.name.as_deref().unwrap()).collect();
    assert_eq!(
        names,
        ["w", "s", "z", "s/qdqc_nbits_scales_16x4_bs32", "w/qdqc_nbits_B_16x4_bs32", "z/qdqc_nbits_zero_points_16x4_bs32"],
        "W stays once, for the Gather's DQ"
    );
}

#[test]
fn explain_lists_level_and_deviations() {
    let dir = tempfile::tempdir().unwrap();
    let case = Case { dt: DataType::Uint4, layout: Layout::Blocked(32), zp: true, k: 64, n: 16 };
    let (report, _) = compile(dir.path(), "m", &case.model("MatMul", None, vec![], &[2, 64]), &allow(AccuracyLevel::Acc4));
    insta::assert_snapshot!("matmulnbits_acc4_explain", report.explain());
}

/// A one-array `.npz`, as `numpy.savez_compressed` writes it (deflated `NAME.npy` in a zip).
fn npz<T: npyz::AutoSerialize + Copy>(name: &str, values: &[T]) -> Vec<u8> {
    use npyz::WriterBuilder;
    let mut buf = std::io::Cursor::new(Vec::new());
    let mut zip = zip::ZipWriter::new(&mut buf);
    zip.start_file(format!("{name}.npy"), zip::write::SimpleFileOptions::default()).unwrap();
    let mut w = npyz::WriteOptions::new().default_dtype().shape(&[values.len() as u64]).writer(&mut zip).begin_nd().unwrap();
    w.extend(values.iter().copied()).unwrap();
    w.finish().unwrap();
    zip.finish().unwrap();
    buf.into_inner()
}

#[test]
fn supplied_inputs_add_a_deviation_and_bad_archives_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let case = Case { dt: DataType::Int4, layout: Layout::Blocked(16), zp: true, k: 32, n: 8 };
    let m = write_model(dir.path(), "m.onnx", &case.model("MatMul", None, vec![], &[3, 32]));
    let good = dir.path().join("a.npz");
    std::fs::write(&good, npz("a", &(0..96).map(|i| (i as f32 - 48.0) / 10.0).collect::<Vec<f32>>())).unwrap();
    let report = dir.path().join("r.json");
    let out = dir.path().join("o.onnx");
    let (m, good, report_s, out_s) = (m.to_str().unwrap(), good.to_str().unwrap(), report.to_str().unwrap(), out.to_str().unwrap());
    let run = qdqc(&["compile", m, "-o", out_s, "--allow", "matmulnbits=acc4", "--inputs", good, "--report", report_s]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert!(String::from_utf8_lossy(&run.stdout).contains("1 lossy"));
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let dev = &json["decisions"][0]["lossy"]["deviation"];
    assert_eq!(dev[1]["rows"], 3);
    assert!(dev[1]["inputs"].as_str().unwrap().ends_with("a.npz: 'a'"));
    let f64s = dir.path().join("f64.npz");
    std::fs::write(&f64s, npz("a", &[0.0f64; 2])).unwrap();
    let missing = dir.path().join("missing.npz");
    for (bad, message) in
        [(f64s.to_str().unwrap(), "array 'a.npy': element type is not float32 ('<f8')"), (missing.to_str().unwrap(), "cannot read the inputs archive")]
    {
        let _ = std::fs::remove_file(&out);
        let run = qdqc(&["compile", m, "-o", out_s, "--allow", "matmulnbits", "--inputs", bad]);
        assert_eq!(run.status.code(), Some(2), "{bad}");
        assert!(stderr(&run).contains(message), "{}", stderr(&run));
        assert!(!out.exists(), "no output on bad inputs");
    }
    for bad in ["matmulnbits=acc2", "fastmath"] {
        let run = qdqc(&["compile", m, "-o", out_s, "--allow", bad]);
        assert_eq!(run.status.code(), Some(2), "{bad}: {}", stderr(&run));
    }
}

#[test]
fn f16_dequantize_cast_to_f32_fuses_and_other_casts_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let case = Case { dt: DataType::Uint4, layout: Layout::Blocked(16), zp: true, k: 32, n: 4 };
    for (to, fused) in [(DataType::Float, true), (DataType::Double, false)] {
        let mut m = case.model("MatMul", None, vec![], &[2, 32]);
        let g = m.graph.as_mut().unwrap();
        // Scale 0.0625 and 0.125 as f16 bit patterns.
        let halves: Vec<u8> = [0x2c00u16, 0x3000].iter().cycle().take(8).flat_map(|h| h.to_le_bytes()).collect();
        g.initializer[1] = TensorProto {
            name: Some("s".into()),
            dims: vec![2, 4],
            data_type: Some(DataType::Float16 as i32),
            raw_data: Some(halves.into()),
            ..Default::default()
        };
        g.node[0].output[0] = "w16".into();
        g.node.insert(1, attr(node("Cast", "cast", &["w16"], &["wf"]), Attribute::int("to", to as i64)));
        let (report, out) = compile(dir.path(), "cast", &m, &allow(AccuracyLevel::Acc1));
        let d = report.decisions.iter().find(|d| d.rule == "matmulnbits-matmul-cast").expect("decided");
        assert_eq!(d.fired, fused, "{to:?}: {d:?}");
        if fused {
            let (_, p) = packed(&out);
            // Row n, block b reads s[b, n]: columns alternate 0.0625 and 0.125.
            assert_eq!(p.scales, [0.0625, 0.0625, 0.125, 0.125, 0.0625, 0.0625, 0.125, 0.125], "f16 scales widened exactly");
        } else {
            assert!(d.reason.values().all(|r| r.contains("not float")), "{:?}", d.reason);
        }
    }
}

#[test]
fn compiling_twice_gives_the_same_bytes_and_report() {
    let dir = tempfile::tempdir().unwrap();
    let case = Case { dt: DataType::Int8, layout: Layout::Blocked(32), zp: true, k: 72, n: 10 };
    let input = write_model(dir.path(), "m.onnx", &case.model("MatMul", None, vec![], &[2, 72]));
    let run = |name: &str| {
        let out = dir.path().join(name);
        let report = qdqc::compile(&input, &out, &allow(AccuracyLevel::Acc4)).unwrap();
        (std::fs::read(&out).unwrap(), report.explain())
    };
    assert_eq!(run("a.onnx"), run("b.onnx"));
}

#[test]
fn weights_above_the_kept_constant_size_are_read_from_their_payload() {
    let dir = tempfile::tempdir().unwrap();
    // 64 × 65 600 codes: above the 2^22 whose values facts keep, so the rule decodes the payload.
    let case = Case { dt: DataType::Uint8, layout: Layout::PerChannel, zp: true, k: 64, n: 65_600 };
    assert!(case.k * case.n > qdqc_lang::analysis::SMALL_CONSTANT);
    let (report, out) = compile(dir.path(), "large", &case.model("MatMul", None, vec![], &[1, 64]), &allow(AccuracyLevel::Acc4));
    assert!(report.decisions[0].fired, "{:?}", report.decisions[0].reason);
    let (_, p) = packed(&out);
    let w = case.weight();
    for (k, n) in [(0, 0), (63, 65_599), (17, 40_000), (40, 12_345)] {
        assert_eq!(p.dequantized(k, n).to_bits(), w.dequantized(k, n).to_bits(), "W[{k}, {n}]");
    }
}

#[test]
fn a_body_initializer_shadowing_a_packed_outer_one_is_an_error_not_a_wrong_model() {
    let dir = tempfile::tempdir().unwrap();
    let case = Case { dt: DataType::Uint4, layout: Layout::Blocked(16), zp: false, k: 16, n: 2 };
    let mut m = case.model("MatMul", None, vec![], &[1, 16]);
    let outer = m.graph.as_ref().unwrap().clone();
    // The branch declares its own 'w' (other codes) and multiplies by it.
    let mut w = outer.initializer[0].clone();
    w.raw_data = Some(vec![0x11u8; 16].into());
    let mut branch = graph("then", outer.node.clone(), vec![], vec![value("y_then", F32, &[1, 2])], vec![w]);
    branch.node[1].output[0] = "y_then".into();
    let mut other = graph("else", vec![node("Identity", "id", &["y"], &["y_else"])], vec![], vec![value("y_else", F32, &[1, 2])], vec![]);
    other.name = Some("else".into());
    let g = m.graph.as_mut().unwrap();
    g.node.push(with_graph(with_graph(node("If", "if", &["c"], &["z"]), "then_branch", branch), "else_branch", other));
    g.input.push(value("c", BOOL, &[]));
    g.output.push(value("z", F32, &[1, 2]));
    let input = write_model(dir.path(), "shadow.onnx", &m);
    let out = dir.path().join("shadow.out.onnx");
    let err = qdqc::compile(&input, &out, &allow(AccuracyLevel::Acc1)).unwrap_err();
    assert!(err.problem.contains("would shadow a different one"), "{err}");
    assert!(!out.exists());
}

/// An `.npy` header declaring `shape` of f32, followed by `data` bytes, deflated in a zip: a
/// bomb when the shape is huge and the data compresses to nothing.
fn npz_declaring(name: &str, shape: &str, data: usize) -> Vec<u8> {
    use std::io::Write;
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut buf = std::io::Cursor::new(Vec::new());
    let mut zip = zip::ZipWriter::new(&mut buf);
    zip.start_file(format!("{name}.npy"), zip::write::SimpleFileOptions::default()).unwrap();
    zip.write_all(b"\x93NUMPY\x01\x00").unwrap();
    zip.write_all(&(header.len() as u16).to_le_bytes()).unwrap();
    zip.write_all(header.as_bytes()).unwrap();
    zip.write_all(&vec![0u8; data]).unwrap();
    zip.finish().unwrap();
    buf.into_inner()
}

#[test]
fn an_inputs_zip_bomb_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let case = Case { dt: DataType::Int4, layout: Layout::Blocked(16), zp: true, k: 32, n: 8 };
    let m = write_model(dir.path(), "m.onnx", &case.model("MatMul", None, vec![], &[3, 32]));
    let bomb = dir.path().join("bomb.npz");
    // 16 GiB declared; 64 MiB of zeros deflate to about 64 KiB.
    std::fs::write(&bomb, npz_declaring("a", "(4294967296,)", 64 << 20)).unwrap();
    assert!(std::fs::metadata(&bomb).unwrap().len() < 1 << 20);
    let out = dir.path().join("o.onnx");
    // "At once": against the same command refused for a missing inputs file, timed beside it (a
    // loaded host slows both alike); inflating the 64 MiB alone takes seconds in a debug build.
    let timed = |inputs: &std::path::Path| {
        let start = std::time::Instant::now();
        let run = qdqc(&["compile", m.to_str().unwrap(), "-o", out.to_str().unwrap(), "--allow", "matmulnbits", "--inputs", inputs.to_str().unwrap()]);
        (run, start.elapsed())
    };
    // Three of each, alternated; the fastest of each (a burst of load slows a run, never speeds it).
    let (mut baseline, mut took, mut run) = (std::time::Duration::MAX, std::time::Duration::MAX, None);
    for _ in 0..3 {
        let (missing, t) = timed(&dir.path().join("missing.npz"));
        assert_eq!(missing.status.code(), Some(2), "{}", stderr(&missing));
        baseline = baseline.min(t);
        let (r, t) = timed(&bomb);
        took = took.min(t);
        run = Some(r);
    }
    let run = run.expect("three runs");
    assert!(took < 3 * baseline + std::time::Duration::from_millis(300), "took {took:?}, a refused missing file {baseline:?}");
    assert_eq!(run.status.code(), Some(2), "{}", stderr(&run));
    assert!(stderr(&run).contains("over the 1073741824-byte bound of --inputs"), "{}", stderr(&run));
    assert!(!out.exists());
}

#[test]
fn unused_inputs_arrays_are_reported_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let case = Case { dt: DataType::Int4, layout: Layout::Blocked(16), zp: true, k: 32, n: 8 };
    let m = write_model(dir.path(), "m.onnx", &case.model("MatMul", None, vec![], &[3, 32]));
    let (out, report) = (dir.path().join("o.onnx"), dir.path().join("r.json"));
    for (key, values, why) in [("nowhere", 32, "no tensor of the model has this name"), ("a", 33, "33 values are not rows of K = 32")] {
        let inputs = dir.path().join(format!("{key}.npz"));
        std::fs::write(&inputs, npz(key, &vec![0.5f32; values])).unwrap();
        let run = qdqc(&[
            "compile",
            m.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--allow",
            "matmulnbits",
            "--inputs",
            inputs.to_str().unwrap(),
            "--report",
            report.to_str().unwrap(),
        ]);
        assert!(run.status.success(), "{}", stderr(&run));
        let warning = format!("array '{key}' not used: {why}");
        assert!(stderr(&run).contains(&warning), "{key}: {}", stderr(&run));
        let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        assert!(json["warnings"].as_array().unwrap().iter().any(|w| w.as_str().unwrap().contains(&warning)), "{}", json["warnings"]);
    }
}
