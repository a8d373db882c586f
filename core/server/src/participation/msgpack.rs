//! MessagePack as algod writes it (go-codec / msgp "canonical" encoding), for the data inside
//! partkey files, participation identities and the append-keys body.
//!
//! - **Encoding** ([`Enc`]) uses `rmp`'s primitives, which always pick the smallest encoding of
//!   an integer and `bin8` for short byte strings; callers write map keys in sorted order and
//!   leave zero values out (`omitempty`), which is what makes the output canonical.
//! - **Decoding** ([`decode`]) reads untrusted bytes into a [`Value`] tree without ever trusting
//!   a declared length: every length is checked against the bytes that remain, nesting is
//!   bounded, and so is the number of values (memory), whatever the lengths claim.

use rmp::Marker;

/// A decoded MessagePack value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Nil,
    Bool(bool),
    Uint(u64),
    Int(i64),
    Float(f64),
    Str(Vec<u8>),
    Bin(Vec<u8>),
    Array(Vec<Value>),
    Map(Vec<(Value, Value)>),
    Ext(i8, Vec<u8>),
}

/// Deepest nesting accepted (partkey data nests four levels at most).
const MAX_DEPTH: usize = 32;
/// Most values one decode may produce. A decoded value takes ~32 bytes of memory for as little
/// as one byte of input, so this bounds memory; the largest real blob (voting secrets with
/// 2^18 batches) holds about 2.4 million values.
pub const MAX_VALUES: usize = 4_000_000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("msgpack decode error at byte {offset}: {message}")]
pub struct DecodeError {
    pub offset: usize,
    pub message: String,
}

impl Value {
    /// The value of `key` in a map with string keys.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Map(entries) => entries.iter().find_map(|(k, v)| match k {
                Value::Str(s) | Value::Bin(s) if s == key.as_bytes() => Some(v),
                _ => None,
            }),
            _ => None,
        }
    }

    /// The string keys of a map (non-string keys are reported as `?`).
    pub fn keys(&self) -> Vec<String> {
        match self {
            Value::Map(entries) => entries
                .iter()
                .map(|(k, _)| match k {
                    Value::Str(s) | Value::Bin(s) => String::from_utf8_lossy(s).into_owned(),
                    _ => "?".to_string(),
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    pub fn is_map(&self) -> bool {
        matches!(self, Value::Map(_))
    }

    /// A non-negative integer (msgp accepts signed encodings of non-negative values too).
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Uint(u) => Some(*u),
            Value::Int(i) => u64::try_from(*i).ok(),
            _ => None,
        }
    }

    /// Bytes, from `bin` or `str` (go-codec accepts both for byte arrays).
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bin(b) | Value::Str(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Value::Nil => "nil",
            Value::Bool(_) => "bool",
            Value::Uint(_) | Value::Int(_) => "integer",
            Value::Float(_) => "float",
            Value::Str(_) => "string",
            Value::Bin(_) => "bytes",
            Value::Array(_) => "array",
            Value::Map(_) => "map",
            Value::Ext(..) => "extension",
        }
    }
}

/// Decodes one value from the start of `bytes`; returns it and how many bytes it used.
pub fn decode(bytes: &[u8]) -> Result<(Value, usize), DecodeError> {
    let mut reader = Reader {
        bytes,
        pos: 0,
        values: 0,
    };
    let value = reader.value(0)?;
    Ok((value, reader.pos))
}

/// Decodes `bytes` that must hold exactly one value.
pub fn decode_exact(bytes: &[u8]) -> Result<Value, DecodeError> {
    let (value, used) = decode(bytes)?;
    if used != bytes.len() {
        return Err(DecodeError {
            offset: used,
            message: format!("{} unexpected bytes after the value", bytes.len() - used),
        });
    }
    Ok(value)
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    values: usize,
}

impl Reader<'_> {
    fn err(&self, message: impl Into<String>) -> DecodeError {
        DecodeError {
            offset: self.pos,
            message: message.into(),
        }
    }

    fn take(&mut self, n: usize) -> Result<&[u8], DecodeError> {
        let remaining = self.bytes.len() - self.pos;
        if n > remaining {
            return Err(self.err(format!(
                "needs {n} more bytes but only {remaining} remain (truncated data)"
            )));
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn be(&mut self, n: usize) -> Result<u64, DecodeError> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
    }

    fn len(&mut self, n: usize) -> Result<usize, DecodeError> {
        let len = self.be(n)?;
        usize::try_from(len).map_err(|_| self.err("length does not fit in memory"))
    }

    fn bytes(&mut self, len: usize) -> Result<Vec<u8>, DecodeError> {
        Ok(self.take(len)?.to_vec())
    }

    fn value(&mut self, depth: usize) -> Result<Value, DecodeError> {
        if depth > MAX_DEPTH {
            return Err(self.err("nesting too deep"));
        }
        self.values += 1;
        if self.values > MAX_VALUES {
            return Err(self.err(format!("more than {MAX_VALUES} values")));
        }
        let marker = Marker::from_u8(self.u8()?);
        Ok(match marker {
            Marker::FixPos(v) => Value::Uint(u64::from(v)),
            Marker::FixNeg(v) => Value::Int(i64::from(v)),
            Marker::Null => Value::Nil,
            Marker::True => Value::Bool(true),
            Marker::False => Value::Bool(false),
            Marker::U8 => Value::Uint(self.be(1)?),
            Marker::U16 => Value::Uint(self.be(2)?),
            Marker::U32 => Value::Uint(self.be(4)?),
            Marker::U64 => Value::Uint(self.be(8)?),
            Marker::I8 => Value::Int(i64::from(self.be(1)? as u8 as i8)),
            Marker::I16 => Value::Int(i64::from(self.be(2)? as u16 as i16)),
            Marker::I32 => Value::Int(i64::from(self.be(4)? as u32 as i32)),
            Marker::I64 => Value::Int(self.be(8)? as i64),
            Marker::F32 => Value::Float(f64::from(f32::from_bits(self.be(4)? as u32))),
            Marker::F64 => Value::Float(f64::from_bits(self.be(8)?)),
            Marker::FixStr(n) => Value::Str(self.bytes(usize::from(n))?),
            Marker::Str8 => {
                let n = self.len(1)?;
                Value::Str(self.bytes(n)?)
            }
            Marker::Str16 => {
                let n = self.len(2)?;
                Value::Str(self.bytes(n)?)
            }
            Marker::Str32 => {
                let n = self.len(4)?;
                Value::Str(self.bytes(n)?)
            }
            Marker::Bin8 => {
                let n = self.len(1)?;
                Value::Bin(self.bytes(n)?)
            }
            Marker::Bin16 => {
                let n = self.len(2)?;
                Value::Bin(self.bytes(n)?)
            }
            Marker::Bin32 => {
                let n = self.len(4)?;
                Value::Bin(self.bytes(n)?)
            }
            Marker::FixArray(n) => self.array(usize::from(n), depth)?,
            Marker::Array16 => {
                let n = self.len(2)?;
                self.array(n, depth)?
            }
            Marker::Array32 => {
                let n = self.len(4)?;
                self.array(n, depth)?
            }
            Marker::FixMap(n) => self.map(usize::from(n), depth)?,
            Marker::Map16 => {
                let n = self.len(2)?;
                self.map(n, depth)?
            }
            Marker::Map32 => {
                let n = self.len(4)?;
                self.map(n, depth)?
            }
            Marker::FixExt1 => self.ext(1)?,
            Marker::FixExt2 => self.ext(2)?,
            Marker::FixExt4 => self.ext(4)?,
            Marker::FixExt8 => self.ext(8)?,
            Marker::FixExt16 => self.ext(16)?,
            Marker::Ext8 => {
                let n = self.len(1)?;
                self.ext(n)?
            }
            Marker::Ext16 => {
                let n = self.len(2)?;
                self.ext(n)?
            }
            Marker::Ext32 => {
                let n = self.len(4)?;
                self.ext(n)?
            }
            Marker::Reserved => {
                self.pos -= 1;
                return Err(self.err("invalid marker byte 0xc1"));
            }
        })
    }

    fn array(&mut self, n: usize, depth: usize) -> Result<Value, DecodeError> {
        // Every element takes at least one byte: a length beyond what remains is a lie.
        if n > self.bytes.len() - self.pos {
            return Err(self.err(format!("array of {n} elements exceeds the data")));
        }
        let mut items = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            items.push(self.value(depth + 1)?);
        }
        Ok(Value::Array(items))
    }

    fn map(&mut self, n: usize, depth: usize) -> Result<Value, DecodeError> {
        if n.saturating_mul(2) > self.bytes.len() - self.pos {
            return Err(self.err(format!("map of {n} entries exceeds the data")));
        }
        let mut entries = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            let k = self.value(depth + 1)?;
            let v = self.value(depth + 1)?;
            entries.push((k, v));
        }
        Ok(Value::Map(entries))
    }

    fn ext(&mut self, n: usize) -> Result<Value, DecodeError> {
        let ty = self.u8()? as i8;
        Ok(Value::Ext(ty, self.bytes(n)?))
    }
}

/// A canonical msgpack writer. Map keys must be written in sorted order by the caller.
#[derive(Debug, Default)]
pub struct Enc(pub Vec<u8>);

impl Enc {
    pub fn new() -> Enc {
        Enc(Vec::new())
    }

    pub fn map(&mut self, len: u32) -> &mut Self {
        // Writing to a Vec cannot fail.
        let _ = rmp::encode::write_map_len(&mut self.0, len);
        self
    }

    pub fn array(&mut self, len: u32) -> &mut Self {
        let _ = rmp::encode::write_array_len(&mut self.0, len);
        self
    }

    pub fn str(&mut self, s: &str) -> &mut Self {
        let _ = rmp::encode::write_str(&mut self.0, s);
        self
    }

    pub fn bin(&mut self, b: &[u8]) -> &mut Self {
        let _ = rmp::encode::write_bin(&mut self.0, b);
        self
    }

    pub fn uint(&mut self, v: u64) -> &mut Self {
        let _ = rmp::encode::write_uint(&mut self.0, v);
        self
    }

    /// Appends bytes that already are one encoded value.
    pub fn raw(&mut self, encoded: &[u8]) -> &mut Self {
        self.0.extend_from_slice(encoded);
        self
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

/// Reads a fixed-size byte field of a struct-like map: absent means all zeros (omitempty);
/// present must have exactly `N` bytes.
pub fn fixed_bytes<const N: usize>(map: &Value, key: &str) -> Result<[u8; N], String> {
    let mut out = [0u8; N];
    match map.get(key) {
        None | Some(Value::Nil) => Ok(out),
        Some(v) => {
            let b = v
                .as_bytes()
                .ok_or_else(|| format!("field {key:?} must be bytes, found {}", v.kind()))?;
            if b.len() != N {
                return Err(format!(
                    "field {key:?} must be {N} bytes, found {}",
                    b.len()
                ));
            }
            out.copy_from_slice(b);
            Ok(out)
        }
    }
}

/// Reads an unsigned integer field: absent means 0 (omitempty).
pub fn uint_field(map: &Value, key: &str) -> Result<u64, String> {
    match map.get(key) {
        None | Some(Value::Nil) => Ok(0),
        Some(v) => v.as_u64().ok_or_else(|| {
            format!(
                "field {key:?} must be a non-negative integer, found {}",
                v.kind()
            )
        }),
    }
}

/// Checks that `value` is a map (the shape of every Go struct).
pub fn expect_map(value: &Value, what: &str) -> Result<(), String> {
    if value.is_map() {
        Ok(())
    } else {
        Err(format!("{what} must be a map, found {}", value.kind()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_minimally() {
        let mut e = Enc::new();
        e.map(2).str("a").uint(5).str("b").bin(&[1, 2]);
        assert_eq!(
            e.into_bytes(),
            vec![0x82, 0xa1, b'a', 0x05, 0xa1, b'b', 0xc4, 0x02, 1, 2]
        );
        let mut e = Enc::new();
        e.uint(300).uint(70000).uint(u64::MAX);
        assert_eq!(
            e.into_bytes(),
            vec![
                0xcd, 0x01, 0x2c, 0xce, 0x00, 0x01, 0x11, 0x70, 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff,
                0xff, 0xff, 0xff
            ]
        );
    }

    #[test]
    fn round_trips_and_reads_fields() {
        let mut e = Enc::new();
        e.map(3)
            .str("fv")
            .uint(1000)
            .str("pk")
            .bin(&[7; 32])
            .str("xs")
            .array(2)
            .uint(1)
            .str("two");
        let v = decode_exact(&e.into_bytes()).unwrap();
        assert_eq!(uint_field(&v, "fv").unwrap(), 1000);
        assert_eq!(uint_field(&v, "missing").unwrap(), 0);
        assert_eq!(fixed_bytes::<32>(&v, "pk").unwrap(), [7; 32]);
        assert!(fixed_bytes::<64>(&v, "pk").is_err());
        assert_eq!(v.get("xs").unwrap().as_array().unwrap().len(), 2);
        assert_eq!(v.keys(), vec!["fv", "pk", "xs"]);
    }

    #[test]
    fn rejects_lies_and_garbage() {
        // array32 claiming 4 billion elements in 5 bytes
        assert!(decode(&[0xdd, 0xff, 0xff, 0xff, 0xff]).is_err());
        // bin32 claiming 4 GiB
        assert!(decode(&[0xc6, 0xff, 0xff, 0xff, 0xff, 0x00]).is_err());
        // map16 with too many entries
        assert!(decode(&[0xde, 0x00, 0x10, 0x01]).is_err());
        assert!(decode(&[0xc1]).is_err());
        assert!(decode(&[]).is_err());
        assert!(decode_exact(&[0x01, 0x02]).is_err());
        // deep nesting is bounded, not a stack overflow
        let deep = vec![0x91u8; 10_000];
        assert!(decode(&deep).is_err());
        // so is the number of values (memory): an array32 of 5 million one-byte values
        let mut many = vec![0xdd, 0x00, 0x4c, 0x4b, 0x40];
        many.resize(5 + 5_000_000, 0x01);
        let err = decode(&many).unwrap_err();
        assert!(err.message.contains("more than"), "{err}");
    }

    #[test]
    fn signed_non_negative_counts_as_uint() {
        let v = decode_exact(&[0xd0, 0x05]).unwrap();
        assert_eq!(v.as_u64(), Some(5));
        let v = decode_exact(&[0xd0, 0xfb]).unwrap();
        assert_eq!(v.as_u64(), None);
    }
}
