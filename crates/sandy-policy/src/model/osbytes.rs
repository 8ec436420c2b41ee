use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Raw bytes of an argument, path or environment entry, carried exactly.
///
/// In JSON a value that is valid UTF-8 is a string (compact, readable); any other value is
/// an array of byte values, so non-UTF-8 arguments survive the trip unchanged.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct OsBytes(pub Vec<u8>);

impl OsBytes {
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
    pub fn as_os_str(&self) -> &OsStr {
        OsStr::from_bytes(&self.0)
    }
    pub fn as_path(&self) -> &Path {
        Path::new(self.as_os_str())
    }
    pub fn contains_nul(&self) -> bool {
        self.0.contains(&0)
    }
}

impl fmt::Debug for OsBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.0))
    }
}

impl From<&OsStr> for OsBytes {
    fn from(s: &OsStr) -> Self {
        OsBytes(s.as_bytes().to_vec())
    }
}
impl From<OsString> for OsBytes {
    fn from(s: OsString) -> Self {
        OsBytes(s.into_vec())
    }
}
impl From<&Path> for OsBytes {
    fn from(p: &Path) -> Self {
        OsBytes(p.as_os_str().as_bytes().to_vec())
    }
}
impl From<PathBuf> for OsBytes {
    fn from(p: PathBuf) -> Self {
        OsBytes(p.into_os_string().into_vec())
    }
}
impl From<&str> for OsBytes {
    fn from(s: &str) -> Self {
        OsBytes(s.as_bytes().to_vec())
    }
}

impl Serialize for OsBytes {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(&self.0) {
            Ok(s) => serializer.serialize_str(s),
            Err(_) => serializer.collect_seq(self.0.iter()),
        }
    }
}

impl<'de> Deserialize<'de> for OsBytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OsBytes;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array of bytes")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<OsBytes, E> {
                Ok(OsBytes(v.as_bytes().to_vec()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<OsBytes, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
                while let Some(b) = seq.next_element::<u8>()? {
                    out.push(b);
                }
                Ok(OsBytes(out))
            }
        }
        deserializer.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_is_a_string_and_other_bytes_an_array() {
        let s = serde_json::to_string(&OsBytes::from("héllo")).unwrap();
        assert_eq!(s, "\"héllo\"");
        let raw = OsBytes(vec![0x66, 0xff, 0x00]);
        let j = serde_json::to_string(&raw).unwrap();
        assert_eq!(j, "[102,255,0]");
        assert_eq!(serde_json::from_str::<OsBytes>(&j).unwrap(), raw);
        assert_eq!(
            serde_json::from_str::<OsBytes>("\"héllo\"").unwrap(),
            OsBytes::from("héllo")
        );
        assert!(serde_json::from_str::<OsBytes>("[256]").is_err());
        assert!(serde_json::from_str::<OsBytes>("{}").is_err());
    }
}
