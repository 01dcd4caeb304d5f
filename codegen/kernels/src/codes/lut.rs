//! A 256-entry table applied to codes: `y = table[x.index()]` (the generator precomputes the table,
//! e.g. a correctly rounded requantized activation; for i8 inputs the index is the bit pattern,
//! so `-1i8` reads entry 255).

use super::shape::check_len;
use super::{CodesError, QCode};

/// `out[i] = table[x[i].index()]`; `x` and `out` the same length.
pub fn apply_lut<X: QCode, Y: Copy>(table: &[Y; 256], x: &[X], out: &mut [Y]) -> Result<(), CodesError> {
    check_len("lut output", out.len(), &[x.len()])?;
    for (y, &v) in out.iter_mut().zip(x) {
        *y = table[v.index()];
    }
    Ok(())
}

/// The table of `f` over every code of `X`, in index order (the generator's helper).
pub fn tabulate<X: QCode, Y: Copy + Default>(f: impl Fn(X) -> Y) -> [Y; 256] {
    let mut t = [Y::default(); 256];
    for (i, y) in t.iter_mut().enumerate() {
        *y = f(X::from_index(i));
    }
    t
}
