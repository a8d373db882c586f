//! Settings an operator names with a word: `runner.backend` and `runner.sandbox`, and the
//! agent's `--backend` and `--sandbox`. Each is an enum parsed by one [`Named`] parser, so
//! the config file, the environment and the command line accept the same words and refuse
//! the same others with the same message.

/// A setting whose values are each named by one word.
pub trait Named: Copy + Send + Sync + 'static {
    /// Every value, in the order messages and help list them.
    fn all() -> &'static [Self];

    /// The word that names this value (in the config, on the command line, in logs).
    fn name(self) -> &'static str;

    /// The value named `word`, exactly (no case folding, no trimming).
    fn from_name(word: &str) -> Result<Self, UnknownValue> {
        Self::all()
            .iter()
            .copied()
            .find(|value| value.name() == word)
            .ok_or_else(|| UnknownValue {
                value: word.to_string(),
                expected: Self::all().iter().map(|value| value.name()).collect(),
            })
    }
}

/// A word that names none of a setting's values; the message lists those it accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not {}", choices(.expected))]
pub struct UnknownValue {
    pub value: String,
    pub expected: Vec<&'static str>,
}

/// `"a", "b" or "c"`.
fn choices(words: &[&str]) -> String {
    let quoted: Vec<String> = words.iter().map(|w| format!("{w:?}")).collect();
    match quoted.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => "anything".to_string(),
    }
}

/// Implements [`Named`] from the enum's `ALL` and `as_str`, and with it `FromStr`,
/// `Display` and serde (as the word), so each setting is declared once.
macro_rules! named_setting {
    ($ty:ty) => {
        impl $crate::setting::Named for $ty {
            fn all() -> &'static [Self] {
                &<$ty>::ALL
            }

            fn name(self) -> &'static str {
                self.as_str()
            }
        }

        impl std::str::FromStr for $ty {
            type Err = $crate::setting::UnknownValue;

            fn from_str(word: &str) -> Result<Self, Self::Err> {
                <$ty as $crate::setting::Named>::from_name(word)
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let word = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                word.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

pub(crate) use named_setting;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BackendKind;
    use crate::sandbox::SandboxMode;

    fn round_trips<T>()
    where
        T: Named + std::fmt::Debug + PartialEq + ToString,
        T: serde::Serialize + serde::de::DeserializeOwned,
    {
        for &value in T::all() {
            assert_eq!(T::from_name(value.name()).unwrap(), value);
            assert_eq!(value.to_string(), value.name());
            let json = serde_json::to_string(&value).unwrap();
            assert_eq!(json, format!("{:?}", value.name()));
            assert_eq!(serde_json::from_str::<T>(&json).unwrap(), value);
        }
    }

    #[test]
    fn every_value_parses_from_its_name() {
        round_trips::<BackendKind>();
        round_trips::<SandboxMode>();
        let kind: BackendKind = serde_json::from_str("\"docker\"").unwrap();
        assert_eq!(kind, BackendKind::Docker);
        assert_eq!(
            serde_json::to_string(&SandboxMode::None).unwrap(),
            "\"none\""
        );
    }

    #[test]
    fn other_words_are_refused_with_the_accepted_ones() {
        for bad in ["", "Docker", "kubernetes", " local", "local "] {
            let err = bad.parse::<BackendKind>().unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("{bad:?} is not \"auto\", \"docker\" or \"local\"")
            );
        }
        let err = "docker".parse::<SandboxMode>().unwrap_err();
        assert_eq!(err.to_string(), "\"docker\" is not \"bwrap\" or \"none\"");
        let err = serde_json::from_str::<SandboxMode>("\"off\"").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("\"off\" is not \"bwrap\" or \"none\""),
            "{err}"
        );
    }

    #[test]
    fn choices_read_as_a_list() {
        assert_eq!(choices(&["a"]), "\"a\"");
        assert_eq!(choices(&["a", "b"]), "\"a\" or \"b\"");
        assert_eq!(choices(&["a", "b", "c"]), "\"a\", \"b\" or \"c\"");
    }
}
