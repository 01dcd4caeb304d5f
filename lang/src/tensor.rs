//! Typed access to tensor data. Claimed dims are only ever compared with the bytes actually
//! present: nothing is allocated from a dim, so a tensor claiming 10^12 elements is an error, not
//! an out-of-memory crash.

use crate::onnx::{DataType, TensorProto};
use bytes::Bytes;

/// Bits one element of `dt` occupies in `raw_data`; `None` for strings and unknown types.
pub fn bits_per_element(dt: DataType) -> Option<u64> {
    use DataType::*;
    Some(match dt {
        Uint2 | Int2 => 2,
        Uint4 | Int4 | Float4e2m1 => 4,
        Float6e2m3 | Float6e3m2 => 6,
        Uint8 | Int8 | Bool | Float8e4m3fn | Float8e4m3fnuz | Float8e5m2 | Float8e5m2fnuz | Float8e8m0 => 8,
        Uint16 | Int16 | Float16 | Bfloat16 => 16,
        Float | Int32 | Uint32 => 32,
        Int64 | Uint64 | Double | Complex64 => 64,
        Complex128 => 128,
        String | Undefined => return None,
    })
}

/// The data type of a tensor, or a problem description.
pub fn data_type(t: &TensorProto) -> Result<DataType, String> {
    let raw = t.data_type.unwrap_or(0);
    match DataType::try_from(raw) {
        Ok(DataType::Undefined) | Err(_) => Err(format!("tensor '{}' has unknown data type {raw}", name(t))),
        Ok(dt) => Ok(dt),
    }
}

pub fn name(t: &TensorProto) -> &str {
    t.name.as_deref().unwrap_or("")
}

/// Number of elements the dims claim, refusing negative dims and overflow.
pub fn element_count(dims: &[i64]) -> Result<u64, String> {
    dims.iter().try_fold(1u64, |acc, &d| {
        let d = u64::try_from(d).map_err(|_| format!("negative dimension {d} in {dims:?}"))?;
        acc.checked_mul(d).ok_or_else(|| format!("dims {dims:?} overflow a 64-bit element count"))
    })
}

/// Bytes `count` elements of `dt` occupy packed in `raw_data`.
pub fn packed_bytes(dt: DataType, count: u64) -> Option<u64> {
    let bits = bits_per_element(dt)?;
    count.checked_mul(bits).map(|b| b.div_ceil(8))
}

/// Where the elements of a tensor live, once external data has been resolved.
#[derive(Clone, Debug)]
pub enum Payload<'a> {
    /// Little-endian packed bytes: `raw_data` or an external file slice.
    Raw(Bytes),
    /// One of the typed repeated fields.
    Typed(&'a TensorProto),
}

/// Checks that the data present holds exactly the elements the dims claim.
pub fn check_payload(t: &TensorProto, dt: DataType, payload: &Payload<'_>) -> Result<(), String> {
    let count = element_count(&t.dims).map_err(|e| format!("tensor '{}': {e}", name(t)))?;
    let (have, want, unit) = match payload {
        Payload::Raw(bytes) => {
            if bits_per_element(dt).is_none() {
                return Err(format!("tensor '{}' of type {} cannot hold raw data", name(t), dt.as_str_name()));
            }
            let want =
                packed_bytes(dt, count).ok_or_else(|| format!("tensor '{}': dims {:?} of {} hold more than 2^64 bits", name(t), t.dims, dt.as_str_name()))?;
            (bytes.len() as u64, want, "bytes")
        }
        Payload::Typed(t) => (typed_len(t, dt) as u64, typed_slots(dt, count), "values"),
    };
    if have != want {
        return Err(format!("tensor '{}' claims dims {:?} ({count} elements of {}) = {want} {unit}, but holds {have}", name(t), t.dims, dt.as_str_name()));
    }
    Ok(())
}

/// Number of entries in the typed field that `dt` uses.
fn typed_len(t: &TensorProto, dt: DataType) -> usize {
    use DataType::*;
    match dt {
        Float | Complex64 => t.float_data.len(),
        Double | Complex128 => t.double_data.len(),
        Int64 => t.int64_data.len(),
        Uint32 | Uint64 => t.uint64_data.len(),
        String => t.string_data.len(),
        _ => t.int32_data.len(),
    }
}

/// Entries the typed field needs for `count` elements (sub-byte types pack into int32_data).
fn typed_slots(dt: DataType, count: u64) -> u64 {
    use DataType::*;
    match dt {
        Complex64 | Complex128 => count * 2,
        Uint4 | Int4 | Float4e2m1 => count.div_ceil(2),
        Uint2 | Int2 => count.div_ceil(4),
        _ => count,
    }
}

/// The integer codes of a tensor read in place, element by element: nothing is widened or
/// copied, so a weight of any size costs no memory beyond its (mapped) payload. Sub-byte types
/// are unpacked low bits first, as ONNX stores them.
#[derive(Clone, Copy)]
pub struct IntView<'p> {
    dt: DataType,
    data: Source<'p>,
    len: usize,
}

#[derive(Clone, Copy)]
enum Source<'p> {
    Raw(&'p [u8]),
    I32(&'p [i32]),
    I64(&'p [i64]),
    U64(&'p [u64]),
}

impl<'p> IntView<'p> {
    /// `None` for a non-integer type.
    pub fn new(dt: DataType, payload: &'p Payload<'_>) -> Option<IntView<'p>> {
        use DataType::*;
        let per_byte = |bits: usize| 8 / bits;
        let (data, len) = match payload {
            Payload::Raw(b) => {
                let len = match dt {
                    Uint8 | Bool | Int8 => b.len(),
                    Uint16 | Int16 => b.len() / 2,
                    Int32 | Uint32 => b.len() / 4,
                    Int64 => b.len() / 8,
                    Uint4 | Int4 => b.len() * per_byte(4),
                    Uint2 | Int2 => b.len() * per_byte(2),
                    _ => return None,
                };
                (Source::Raw(b), len)
            }
            Payload::Typed(t) => match dt {
                Uint8 | Bool | Int8 | Uint16 | Int16 | Int32 => (Source::I32(&t.int32_data), t.int32_data.len()),
                Uint4 | Int4 => (Source::I32(&t.int32_data), t.int32_data.len() * 2),
                Uint2 | Int2 => (Source::I32(&t.int32_data), t.int32_data.len() * 4),
                Int64 => (Source::I64(&t.int64_data), t.int64_data.len()),
                Uint32 => (Source::U64(&t.uint64_data), t.uint64_data.len()),
                _ => return None,
            },
        };
        Some(IntView { dt, data, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Element `i` (< `len`).
    pub fn get(&self, i: usize) -> i64 {
        use DataType::*;
        match self.data {
            Source::Raw(b) => match self.dt {
                Uint8 | Bool => b[i] as i64,
                Int8 => b[i] as i8 as i64,
                Uint16 => u16::from_le_bytes([b[2 * i], b[2 * i + 1]]) as i64,
                Int16 => i16::from_le_bytes([b[2 * i], b[2 * i + 1]]) as i64,
                Int32 => i32::from_le_bytes(b[4 * i..4 * i + 4].try_into().expect("4 bytes")) as i64,
                Uint32 => u32::from_le_bytes(b[4 * i..4 * i + 4].try_into().expect("4 bytes")) as i64,
                Int64 => i64::from_le_bytes(b[8 * i..8 * i + 8].try_into().expect("8 bytes")),
                Uint4 | Int4 => nibble(b[i / 2] >> (4 * (i % 2)), self.dt),
                _ => crumb(b[i / 4] >> (2 * (i % 4)), self.dt),
            },
            Source::I32(v) => match self.dt {
                Uint4 | Int4 => nibble((v[i / 2] as u8) >> (4 * (i % 2)), self.dt),
                Uint2 | Int2 => crumb((v[i / 4] as u8) >> (2 * (i % 4)), self.dt),
                _ => v[i] as i64,
            },
            Source::I64(v) => v[i],
            Source::U64(v) => v[i] as i64,
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = i64> + '_ {
        (0..self.len).map(|i| self.get(i))
    }

    /// Smallest and largest element, in one pass; `None` when empty.
    pub fn range(&self) -> Option<(i64, i64)> {
        if let (Source::Raw(b), DataType::Int8 | DataType::Uint8 | DataType::Bool) = (self.data, self.dt) {
            // The common weight: a byte pass the compiler vectorises.
            let (mut lo, mut hi) = (u8::MAX, u8::MIN);
            if self.dt == DataType::Int8 {
                let (mut l, mut h) = (i8::MAX, i8::MIN);
                b.iter().for_each(|&x| (l, h) = (l.min(x as i8), h.max(x as i8)));
                return (!b.is_empty()).then_some((l as i64, h as i64));
            }
            b.iter().for_each(|&x| (lo, hi) = (lo.min(x), hi.max(x)));
            return (!b.is_empty()).then_some((lo as i64, hi as i64));
        }
        self.iter().fold(None, |acc, v| Some(acc.map_or((v, v), |(lo, hi): (i64, i64)| (lo.min(v), hi.max(v)))))
    }
}

/// The integer values of an integer tensor (codes, zero points, biases), widened to i64 (8 bytes
/// a code): for tensors known to be small; a large one is read through [`IntView`]. `None` for
/// a non-integer type.
pub fn ints(dt: DataType, payload: &Payload<'_>) -> Option<Vec<i64>> {
    let view = IntView::new(dt, payload)?;
    Some(view.iter().collect())
}

fn nibble(x: u8, dt: DataType) -> i64 {
    let v = (x & 0xf) as i64;
    if dt == DataType::Int4 && v >= 8 { v - 16 } else { v }
}

fn crumb(x: u8, dt: DataType) -> i64 {
    let v = (x & 0x3) as i64;
    if dt == DataType::Int2 && v >= 2 { v - 4 } else { v }
}

/// The exact bit patterns of an f32 tensor (scales are compared bitwise, never as numbers).
pub fn f32_bits(dt: DataType, payload: &Payload<'_>) -> Option<Vec<u32>> {
    if dt != DataType::Float {
        return None;
    }
    Some(match payload {
        Payload::Raw(b) => b.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect(),
        Payload::Typed(t) => t.float_data.iter().map(|f| f.to_bits()).collect(),
    })
}

/// The exact bit patterns of an f16 tensor (typed payloads keep each in an int32).
pub fn f16_bits(dt: DataType, payload: &Payload<'_>) -> Option<Vec<u16>> {
    if dt != DataType::Float16 {
        return None;
    }
    Some(match payload {
        Payload::Raw(b) => b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect(),
        Payload::Typed(t) => t.int32_data.iter().map(|&x| x as u16).collect(),
    })
}

/// Inclusive range of the codes a quantized integer type can hold.
pub fn int_range(dt: DataType) -> Option<(i64, i64)> {
    use DataType::*;
    Some(match dt {
        Uint2 => (0, 3),
        Int2 => (-2, 1),
        Uint4 => (0, 15),
        Int4 => (-8, 7),
        Uint8 | Bool => (0, 255),
        Int8 => (-128, 127),
        Uint16 => (0, 65535),
        Int16 => (-32768, 32767),
        Int32 => (i32::MIN as i64, i32::MAX as i64),
        Uint32 => (0, u32::MAX as i64),
        Int64 => (i64::MIN, i64::MAX),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claimed_dims_never_allocate() {
        let t = TensorProto { dims: vec![1_000_000, 1_000_000], data_type: Some(1), ..Default::default() };
        let err = check_payload(&t, DataType::Float, &Payload::Raw(Bytes::new())).unwrap_err();
        assert!(err.contains("1000000000000 elements"), "{err}");
    }

    #[test]
    fn int4_unpacks_low_nibble_first_with_sign() {
        let p = Payload::Raw(Bytes::from_static(&[0x8f]));
        assert_eq!(ints(DataType::Int4, &p), Some(vec![-1, -8]));
        assert_eq!(ints(DataType::Uint4, &p), Some(vec![15, 8]));
    }

    #[test]
    fn int2_unpacks_lowest_bits_first_with_sign() {
        let p = Payload::Raw(Bytes::from_static(&[0b1110_0100]));
        assert_eq!(ints(DataType::Int2, &p), Some(vec![0, 1, -2, -1]));
        assert_eq!(ints(DataType::Uint2, &p), Some(vec![0, 1, 2, 3]));
    }

    #[test]
    fn overflowing_dims_are_refused() {
        assert!(element_count(&[i64::MAX, 4]).is_err());
        assert!(element_count(&[-1]).is_err());
        assert_eq!(element_count(&[]), Ok(1));
    }
}
