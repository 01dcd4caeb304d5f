//! The lossy rewrites a user permits by name — `--allow NAME[=VALUE]` on the command line, `allow=`
//! in Python, `.allow(..)` in a build script — read in one place so all three accept the same names.

use crate::{AccuracyLevel, Allow};

/// Permits the lossy rewrite `name` (`matmulnbits[=acc0|acc1|acc4]`, `ort-float-fusions`) in `allow`.
pub fn allow_one(allow: &mut Allow, name: &str) -> Result<(), String> {
    let (key, value) = name.split_once('=').map_or((name, None), |(k, v)| (k, Some(v)));
    match key {
        "matmulnbits" => {
            let level = value.unwrap_or("acc1");
            allow.matmulnbits = Some(AccuracyLevel::parse(level).ok_or_else(|| format!("unknown matmulnbits accuracy level '{level}' (acc0, acc1 or acc4)"))?);
        }
        "ort-float-fusions" if value.is_none() => allow.ort_float_fusions = true,
        "ort-float-fusions" => return Err("ort-float-fusions takes no value".into()),
        _ => return Err(format!("unknown lossy rewrite '{key}' (known: matmulnbits, ort-float-fusions)")),
    }
    Ok(())
}

/// The permissions `names` give, or the first name's error.
pub fn allow(names: &[impl AsRef<str>]) -> Result<Allow, String> {
    let mut allow = Allow::default();
    for name in names {
        allow_one(&mut allow, name.as_ref())?;
    }
    Ok(allow)
}
