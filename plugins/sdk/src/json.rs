//! Tolerant accessors over `serde_json::Value` with JSON-pointer paths (`/repository/name`):
//! missing or mistyped fields read as empty, which is what webhook parsing wants.
//!
//! For hot paths (the push hook), the same tolerance as field types of a typed
//! `#[derive(Deserialize)]` struct: [`Text`], [`Flag`], [`Lenient`], [`List`] and [`StrItem`].
//! Deserializing into those skips every field the parser does not read and borrows unescaped
//! strings from the payload, instead of building a `Value` tree (most of a hook's cost in a
//! guest: one allocation per JSON string, array and object).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// The string at `ptr`, or `""`. Numbers are rendered as text (ids).
pub fn str_at(v: &Value, ptr: &str) -> String {
    match v.pointer(ptr) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

/// The first non-empty string among `ptrs`.
pub fn first_str(v: &Value, ptrs: &[&str]) -> String {
    ptrs.iter()
        .map(|p| str_at(v, p))
        .find(|s| !s.is_empty())
        .unwrap_or_default()
}

pub fn bool_at(v: &Value, ptr: &str) -> bool {
    v.pointer(ptr).and_then(Value::as_bool).unwrap_or(false)
}

pub fn u64_at(v: &Value, ptr: &str) -> Option<u64> {
    v.pointer(ptr).and_then(Value::as_u64)
}

/// The array at `ptr` (empty if absent).
pub fn array_at<'a>(v: &'a Value, ptr: &str) -> &'a [Value] {
    v.pointer(ptr)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The strings of the array at `ptr`.
pub fn strings_at(v: &Value, ptr: &str) -> Vec<String> {
    array_at(v, ptr)
        .iter()
        .filter_map(|x| x.as_str().map(str::to_string))
        .collect()
}

/// Parses an RFC 3339 timestamp (`2024-05-01T12:00:00Z`, `...+02:00`, fractions allowed)
/// into Unix seconds; 0 when it is not one.
pub fn rfc3339_to_unix(s: &str) -> i64 {
    fn num(s: &str) -> Option<i64> {
        s.parse().ok()
    }
    let b = s.as_bytes();
    // Byte slicing below must not split a character: timestamps are ASCII.
    if !s.is_ascii()
        || b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || (b[10] != b'T' && b[10] != b' ')
    {
        return 0;
    }
    let (Some(y), Some(mo), Some(d), Some(h), Some(mi), Some(sec)) = (
        num(&s[0..4]),
        num(&s[5..7]),
        num(&s[8..10]),
        num(&s[11..13]),
        num(&s[14..16]),
        num(&s[17..19]),
    ) else {
        return 0;
    };
    let mut rest = &s[19..];
    if let Some(r) = rest.strip_prefix('.') {
        rest = r.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    let offset = match rest {
        "" | "Z" | "z" => 0,
        // `+02:00`, or `+0200` as Bitbucket Data Center writes it.
        r if (r.len() == 6 && r.as_bytes()[3] == b':' || r.len() == 5)
            && (r.starts_with('+') || r.starts_with('-')) =>
        {
            let sign = if r.starts_with('-') { -1 } else { 1 };
            match (num(&r[1..3]), num(&r[r.len() - 2..])) {
                (Some(oh), Some(om)) => sign * (oh * 3600 + om * 60),
                _ => return 0,
            }
        }
        _ => return 0,
    };
    // Days from civil (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    days * 86400 + h * 3600 + mi * 60 + sec - offset
}

/// Drains the rest of a map, so a visitor may answer "empty" for a mistyped value.
fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

/// A string field read as [`str_at`] reads it: a string (borrowed when it has no escapes), a
/// number as text, anything else (null, bool, object, array) as `""`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Text<'a>(pub Cow<'a, str>);

impl Text<'_> {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0.into_owned()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v)))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Text<'a>, E> {
                // Rendered exactly as `serde_json::Number` renders it (what `str_at` returns).
                Ok(Text(Cow::Owned(
                    serde_json::Number::from_f64(v)
                        .map(|n| n.to_string())
                        .unwrap_or_default(),
                )))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Text<'a>, E> {
                Ok(Text::default())
            }
            fn visit_unit<E>(self) -> Result<Text<'a>, E> {
                Ok(Text::default())
            }
            fn visit_none<E>(self) -> Result<Text<'a>, E> {
                Ok(Text::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Text<'a>, A::Error> {
                drain_map(map).map(|()| Text::default())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Text<'a>, A::Error> {
                drain_seq(seq).map(|()| Text::default())
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A boolean field read as [`bool_at`] reads it: `true` only for JSON `true`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Flag(pub bool);

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Flag;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Flag, E> {
                Ok(Flag(v))
            }
            fn visit_borrowed_str<E>(self, _: &'de str) -> Result<Flag, E> {
                Ok(Flag(false))
            }
            fn visit_str<E>(self, _: &str) -> Result<Flag, E> {
                Ok(Flag(false))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Flag, E> {
                Ok(Flag(false))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Flag, E> {
                Ok(Flag(false))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Flag, E> {
                Ok(Flag(false))
            }
            fn visit_unit<E>(self) -> Result<Flag, E> {
                Ok(Flag(false))
            }
            fn visit_none<E>(self) -> Result<Flag, E> {
                Ok(Flag(false))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Flag, A::Error> {
                drain_map(map).map(|()| Flag(false))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Flag, A::Error> {
                drain_seq(seq).map(|()| Flag(false))
            }
        }
        d.deserialize_any(V)
    }
}

/// A nested object: `T` when the value is a JSON object, `T::default()` otherwise (as a JSON
/// pointer through a non-object finds nothing).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Lenient<T>(pub T);

impl<'de, T: Deserialize<'de> + Default> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de> + Default> Visitor<'de> for V<T> {
            type Value = Lenient<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Lenient<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Lenient)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Lenient<T>, A::Error> {
                drain_seq(seq).map(|()| Lenient::default())
            }
            fn visit_bool<E>(self, _: bool) -> Result<Lenient<T>, E> {
                Ok(Lenient::default())
            }
            fn visit_borrowed_str<E>(self, _: &'de str) -> Result<Lenient<T>, E> {
                Ok(Lenient::default())
            }
            fn visit_str<E>(self, _: &str) -> Result<Lenient<T>, E> {
                Ok(Lenient::default())
            }
            fn visit_u64<E>(self, _: u64) -> Result<Lenient<T>, E> {
                Ok(Lenient::default())
            }
            fn visit_i64<E>(self, _: i64) -> Result<Lenient<T>, E> {
                Ok(Lenient::default())
            }
            fn visit_f64<E>(self, _: f64) -> Result<Lenient<T>, E> {
                Ok(Lenient::default())
            }
            fn visit_unit<E>(self) -> Result<Lenient<T>, E> {
                Ok(Lenient::default())
            }
            fn visit_none<E>(self) -> Result<Lenient<T>, E> {
                Ok(Lenient::default())
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// An array field read as [`array_at`] reads it: its elements, or none when the value is not
/// an array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct List<T>(pub Vec<T>);

impl<T> Default for List<T> {
    fn default() -> Self {
        List(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for List<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = List<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<List<T>, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
                while let Some(x) = seq.next_element()? {
                    out.push(x);
                }
                Ok(List(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<List<T>, A::Error> {
                drain_map(map).map(|()| List::default())
            }
            fn visit_bool<E>(self, _: bool) -> Result<List<T>, E> {
                Ok(List::default())
            }
            fn visit_borrowed_str<E>(self, _: &'de str) -> Result<List<T>, E> {
                Ok(List::default())
            }
            fn visit_str<E>(self, _: &str) -> Result<List<T>, E> {
                Ok(List::default())
            }
            fn visit_u64<E>(self, _: u64) -> Result<List<T>, E> {
                Ok(List::default())
            }
            fn visit_i64<E>(self, _: i64) -> Result<List<T>, E> {
                Ok(List::default())
            }
            fn visit_f64<E>(self, _: f64) -> Result<List<T>, E> {
                Ok(List::default())
            }
            fn visit_unit<E>(self) -> Result<List<T>, E> {
                Ok(List::default())
            }
            fn visit_none<E>(self) -> Result<List<T>, E> {
                Ok(List::default())
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// An element of a string list read as [`strings_at`] reads it: `Some` for a string, `None`
/// (skipped) for anything else.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StrItem<'a>(pub Option<Cow<'a, str>>);

impl<'de: 'a, 'a> Deserialize<'de> for StrItem<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = StrItem<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<StrItem<'a>, E> {
                Ok(StrItem(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> Result<StrItem<'a>, E> {
                Ok(StrItem(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_string<E>(self, v: String) -> Result<StrItem<'a>, E> {
                Ok(StrItem(Some(Cow::Owned(v))))
            }
            fn visit_bool<E>(self, _: bool) -> Result<StrItem<'a>, E> {
                Ok(StrItem(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<StrItem<'a>, E> {
                Ok(StrItem(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<StrItem<'a>, E> {
                Ok(StrItem(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<StrItem<'a>, E> {
                Ok(StrItem(None))
            }
            fn visit_unit<E>(self) -> Result<StrItem<'a>, E> {
                Ok(StrItem(None))
            }
            fn visit_none<E>(self) -> Result<StrItem<'a>, E> {
                Ok(StrItem(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<StrItem<'a>, A::Error> {
                drain_map(map).map(|()| StrItem(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<StrItem<'a>, A::Error> {
                drain_seq(seq).map(|()| StrItem(None))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339() {
        assert_eq!(rfc3339_to_unix("1970-01-01T00:00:00Z"), 0);
        assert_eq!(rfc3339_to_unix("2024-05-01T12:00:00Z"), 1714564800);
        assert_eq!(rfc3339_to_unix("2024-05-01T14:00:00+02:00"), 1714564800);
        assert_eq!(rfc3339_to_unix("2024-05-01T22:00:00+1000"), 1714564800);
        assert_eq!(rfc3339_to_unix("2024-05-01T12:00:00.123Z"), 1714564800);
        assert_eq!(rfc3339_to_unix("nope"), 0);
    }
}
