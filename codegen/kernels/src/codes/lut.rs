//! A 256-entry table applied to codes: `y = table[x.index()]` (the generator precomputes the table,
//! e.g. a correctly rounded requantized activation; for i8 inputs the index is the bit pattern,
//! so `-1i8` reads entry 255).

use super::lookup::map_codes;
use super::shape::check_len;
use super::{CodesError, QCode};
use crate::isa::Kernels;

/// `out[i] = table[x[i].index()]` on `kernels`' path (every path copies the entry the index
/// names: the same bits); `x` and `out` the same length.
pub fn apply_lut<X: QCode, Y: QCode>(kernels: Kernels, table: &[Y; 256], x: &[X], out: &mut [Y]) -> Result<(), CodesError> {
    check_len("lut output", out.len(), &[x.len()])?;
    map_codes(kernels, table, x, out);
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
