//! Every kind of bad input exits with code 2, prints one line naming the file (and the node when
//! there is one) and the problem, and leaves no output file behind.

mod common;

use common::*;
use prost::Message;
use std::path::Path;

/// Runs `qdqc compile` on the model written by `make`, checks the refusal, returns the message.
fn refused(make: impl FnOnce(&Path) -> std::path::PathBuf) -> String {
    let dir = tempfile::tempdir().unwrap();
    let input = make(dir.path());
    let out_dir = tempfile::tempdir().unwrap();
    let output = out_dir.path().join("out.onnx");
    let run = qdqc(&["compile", input.to_str().unwrap(), "-o", output.to_str().unwrap()]);
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(2), "exit code; stderr: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one-line error, got: {err}");
    assert!(err.contains(input.to_str().unwrap()), "error names the file: {err}");
    assert!(listing(out_dir.path()).is_empty(), "no output left: {:?}", listing(out_dir.path()));
    // Every command that reads a model refuses the same input the same way.
    for args in [vec!["inspect"], vec!["audit", "--json"], vec!["placement", input.to_str().unwrap()]] {
        let run = qdqc(&[args.as_slice(), &[input.to_str().unwrap()]].concat());
        assert_eq!(run.status.code(), Some(2), "{args:?} exit code: {}", stderr(&run));
        assert_eq!(stderr(&run).trim_end().lines().count(), 1, "{args:?}: one-line error");
        assert!(run.stdout.is_empty(), "{args:?} printed output for a bad input");
    }
    err
}

fn edited(dir: &Path, edit: impl FnOnce(&mut qdqc_lang::onnx::ModelProto)) -> std::path::PathBuf {
    let mut m = qdq_conv();
    edit(&mut m);
    write_model(dir, "bad.onnx", &m)
}

fn nodes(m: &mut qdqc_lang::onnx::ModelProto) -> &mut Vec<qdqc_lang::onnx::NodeProto> {
    &mut m.graph.as_mut().unwrap().node
}

#[test]
fn truncated_file() {
    let err = refused(|d| {
        let bytes = qdq_conv().encode_to_vec();
        let p = d.join("truncated.onnx");
        std::fs::write(&p, &bytes[..bytes.len() * 2 / 3]).unwrap();
        p
    });
    assert!(err.contains("not an ONNX model"), "{err}");
}

#[test]
fn non_protobuf_bytes() {
    let err = refused(|d| {
        let p = d.join("picture.onnx");
        std::fs::write(&p, b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR this is not a model").unwrap();
        p
    });
    assert!(err.contains("not an ONNX model"), "{err}");
}

#[test]
fn empty_file() {
    let err = refused(|d| {
        let p = d.join("empty.onnx");
        std::fs::write(&p, b"").unwrap();
        p
    });
    assert!(err.contains("empty file"), "{err}");
}

#[test]
fn missing_file() {
    let err = refused(|d| d.join("nowhere.onnx"));
    assert!(err.contains("cannot read"), "{err}");
}

#[test]
fn missing_initializer() {
    let err = refused(|d| edited(d, |m| m.graph.as_mut().unwrap().initializer.retain(|t| t.name.as_deref() != Some("s_w"))));
    assert!(err.contains("node 'DQ_w' (DequantizeLinear)") && err.contains("input 's_w' is not produced"), "{err}");
}

#[test]
fn dangling_input_name() {
    let err = refused(|d| edited(d, |m| nodes(m)[3].input[0] = "dq_ghost".into()));
    assert!(err.contains("node 'Conv' (Conv)") && err.contains("'dq_ghost'"), "{err}");
}

#[test]
fn dangling_graph_output() {
    let err = refused(|d| edited(d, |m| m.graph.as_mut().unwrap().output[0].name = Some("nothing".into())));
    assert!(err.contains("graph output") && err.contains("'nothing'"), "{err}");
}

#[test]
fn cycle() {
    let err = refused(|d| {
        edited(d, |m| {
            // DQ_x now reads the Conv's requantized output: Q_x is bypassed and a loop closes.
            nodes(m)[1].input[0] = "q_c".into();
        })
    });
    assert!(err.contains("cycle"), "{err}");
}

#[test]
fn value_defined_twice() {
    let err = refused(|d| edited(d, |m| nodes(m)[2].output[0] = "dq_x".into()));
    assert!(err.contains("'dq_x' is defined twice") && err.contains("node 'DQ_w'"), "{err}");
}

#[test]
fn scale_and_zero_point_shapes_disagree() {
    let err = refused(|d| {
        edited(d, |m| {
            let g = m.graph.as_mut().unwrap();
            g.initializer.retain(|t| !matches!(t.name.as_deref(), Some("s_w" | "z_w")));
            g.initializer.push(f32s("s_w", &[4], &[0.1, 0.2, 0.3, 0.4]));
            g.initializer.push(u8s("z_w", &[3], &[1, 2, 3]));
        })
    });
    assert!(err.contains("node 'DQ_w' (DequantizeLinear)") && err.contains("shape [4]") && err.contains("shape [3]"), "{err}");
}

#[test]
fn unknown_opset_version() {
    let err = refused(|d| edited(d, |m| m.opset_import[0].version = Some(99)));
    assert!(err.contains("unknown opset version 99"), "{err}");
}

#[test]
fn domain_not_imported() {
    let err = refused(|d| edited(d, |m| nodes(m)[3].domain = Some("com.example".into())));
    assert!(err.contains("domain 'com.example' is not imported") && err.contains("node 'Conv'"), "{err}");
}

#[test]
fn newer_ir_version() {
    let err = refused(|d| edited(d, |m| m.ir_version = Some(99)));
    assert!(err.contains("unsupported IR version 99"), "{err}");
}

#[test]
fn trillion_element_dim() {
    let err = refused(|d| {
        edited(d, |m| {
            let w = m.graph.as_mut().unwrap().initializer.iter_mut().find(|t| t.name.as_deref() == Some("w")).unwrap();
            w.dims = vec![1_000_000, 1_000_000];
        })
    });
    assert!(err.contains("'w'") && err.contains("1000000000000 elements"), "{err}");
}

fn external(dir: &Path, location: &str) -> std::path::PathBuf {
    edited(dir, |m| {
        let w = m.graph.as_mut().unwrap().initializer.iter_mut().find(|t| t.name.as_deref() == Some("w")).unwrap();
        w.raw_data = None;
        w.data_location = Some(1);
        w.external_data = vec![qdqc_lang::onnx::StringStringEntryProto { key: Some("location".into()), value: Some(location.into()) }];
    })
}

#[test]
fn external_data_outside_the_folder() {
    let err = refused(|d| {
        std::fs::write(d.parent().unwrap().join("qdqc-secret.bin"), [0u8; 36]).ok();
        external(d, "../qdqc-secret.bin")
    });
    assert!(err.contains("escapes the model's folder"), "{err}");
}

#[test]
fn external_data_absolute_path() {
    let err = refused(|d| external(d, "/etc/passwd"));
    assert!(err.contains("escapes the model's folder"), "{err}");
}

#[test]
fn external_data_symlink_out() {
    let err = refused(|d| {
        let outside = tempfile::tempdir().unwrap().keep();
        std::fs::write(outside.join("w.bin"), [0u8; 36]).unwrap();
        std::os::unix::fs::symlink(outside.join("w.bin"), d.join("w.bin")).unwrap();
        external(d, "w.bin")
    });
    assert!(err.contains("through a symbolic link"), "{err}");
}

fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo").arg(path).status().expect("mkfifo runs");
    assert!(made.success(), "mkfifo {}", path.display());
}

/// A FIFO would block the open until a writer comes: refused at once, for every command.
#[test]
fn fifo_as_the_model() {
    let start = std::time::Instant::now();
    let err = refused(|d| {
        let p = d.join("pipe.onnx");
        mkfifo(&p);
        p
    });
    assert!(err.contains("is a FIFO (named pipe), not an ONNX model"), "{err}");
    // `refused` runs compile, inspect, audit and placement: four refusals within a second each.
    assert!(start.elapsed() < std::time::Duration::from_secs(4), "refused in {:?}", start.elapsed());
    let pipe = tempfile::tempdir().unwrap();
    let p = pipe.path().join("pipe.onnx");
    mkfifo(&p);
    let one = std::time::Instant::now();
    let run = qdqc(&["inspect", p.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(2));
    assert!(one.elapsed() < std::time::Duration::from_secs(1), "one refusal took {:?}", one.elapsed());
}

#[test]
fn fifo_as_external_data() {
    let err = refused(|d| {
        mkfifo(&d.join("w.bin"));
        external(d, "w.bin")
    });
    assert!(err.contains("'w'") && err.contains("is a FIFO (named pipe), not an external data file"), "{err}");
}

#[test]
fn directory_as_external_data() {
    let err = refused(|d| {
        std::fs::create_dir(d.join("w.bin")).unwrap();
        external(d, "w.bin")
    });
    assert!(err.contains("is a directory, not an external data file"), "{err}");
}

#[test]
fn external_data_too_short() {
    let err = refused(|d| {
        std::fs::write(d.join("w.bin"), [0u8; 10]).unwrap();
        external(d, "w.bin")
    });
    assert!(err.contains("'w'") && err.contains("holds 10"), "{err}");
}

#[test]
fn usage_errors_exit_2() {
    let run = qdqc(&["compile", "model.onnx"]);
    assert_eq!(run.status.code(), Some(2), "{}", stderr(&run));
    let run = qdqc(&["frobnicate"]);
    assert_eq!(run.status.code(), Some(2), "{}", stderr(&run));
}

#[test]
fn unwritable_output_exits_1_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let input = write_model(dir.path(), "m.onnx", &qdq_conv());
    let output = dir.path().join("no-such-dir").join("out.onnx");
    let run = qdqc(&["compile", input.to_str().unwrap(), "-o", output.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    assert_eq!(stderr(&run).trim_end().lines().count(), 1);
    assert_eq!(listing(dir.path()), vec!["m.onnx"]);
}

#[test]
fn quantize_linear_without_scale() {
    let err = refused(|d| edited(d, |m| nodes(m)[0].input.truncate(1)));
    assert!(err.contains("node 'Q_x' (QuantizeLinear)") && err.contains("takes x, scale"), "{err}");
}

/// A model nested past protobuf's recursion limit: a short line, not the kilobytes of field path
/// prost's error carries.
#[test]
fn nesting_past_the_recursion_limit() {
    let err = refused(|d| {
        let mut g = qdqc_lang::onnx::GraphProto::default();
        for _ in 0..120 {
            let attr = qdqc_lang::onnx::AttributeProto { g: Some(g), ..Default::default() };
            g = qdqc_lang::onnx::GraphProto { node: vec![qdqc_lang::onnx::NodeProto { attribute: vec![attr], ..Default::default() }], ..Default::default() };
        }
        write_model(d, "deep.onnx", &qdqc_lang::onnx::ModelProto { ir_version: Some(8), graph: Some(g), ..Default::default() })
    });
    assert!(err.contains("recursion limit reached") && err.len() < 300, "{err}");
}

/// External data shorter than the tensor: the numbers, never a Rust `Some(..)`.
#[test]
fn external_data_range_message_has_no_rust_syntax() {
    let err = refused(|d| {
        std::fs::write(d.join("w.bin"), [0u8; 10]).unwrap();
        edited(d, |m| {
            let w = m.graph.as_mut().unwrap().initializer.iter_mut().find(|t| t.name.as_deref() == Some("w")).unwrap();
            w.raw_data = None;
            w.data_location = Some(1);
            let entry = |k: &str, v: &str| qdqc_lang::onnx::StringStringEntryProto { key: Some(k.into()), value: Some(v.into()) };
            w.external_data = vec![entry("location", "w.bin"), entry("offset", "4"), entry("length", "1408")];
        })
    });
    assert!(err.contains("offset 4 length 1408 exceeds 'w.bin' (10 bytes)") && !err.contains("Some("), "{err}");
}

/// Compiling for profiles that leave out the host's prints one warning line naming the host's
/// profile; `all` and `host` print none.
#[test]
fn compiling_for_a_profile_the_host_lacks_warns() {
    let host = host_isa();
    let other = if host == qdqc_ort::Isa::X86Avx2 { "x86-avx512vnni" } else { "x86-avx2" };
    let dir = tempfile::tempdir().unwrap();
    let input = write_model(dir.path(), "m.onnx", &qdq_conv());
    let out = dir.path().join("o.onnx");
    let compile = |isa: &str| qdqc(&["compile", input.to_str().unwrap(), "-o", out.to_str().unwrap(), "--ort-isa", isa]);
    let run = compile(other);
    assert!(run.status.success(), "{}", stderr(&run));
    let warning = format!("ONNX Runtime on this host runs {host} kernels, where the guarantee does not hold");
    assert!(stderr(&run).contains(&warning) && stderr(&run).lines().count() == 1, "{}", stderr(&run));
    for isa in ["all", "host"] {
        let run = compile(isa);
        assert!(run.status.success() && stderr(&run).is_empty(), "{isa}: {}", stderr(&run));
    }
}
