//! [`Text`]: a configuration scalar read as text, whatever YAML type it was written as.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// A scalar read as text: strings as written, numbers and booleans in their canonical form
/// (so `bearer_token: 12345` or a port-like value from the environment is still text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Text(pub(crate) String);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TextVisitor)
    }
}

struct TextVisitor;

impl Visitor<'_> for TextVisitor {
    type Value = Text;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Text, E> {
        Ok(Text(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Text, E> {
        Ok(Text(value))
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Text, E> {
        Ok(Text(value.to_string()))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Text, E> {
        Ok(Text(value.to_string()))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Text, E> {
        Ok(Text(value.to_string()))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Text, E> {
        Ok(Text(value.to_string()))
    }
}
