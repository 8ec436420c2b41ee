//! Reading the gitlinks (submodule entries) out of a git index file, so that the
//! supervisor can check, after a run, only the submodules `git` outside would enter
//! instead of walking the whole project.

/// The file mode git records for a gitlink.
const GITLINK_MODE: u32 = 0o160000;
/// Entries read at most.
const MAX_ENTRIES: u32 = 4_000_000;

/// Why an index could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    #[error("not a git index")]
    NotAnIndex,
    #[error("unsupported git index version {0}")]
    Version(u32),
    #[error("truncated git index")]
    Truncated,
}

fn be32(b: &[u8], at: usize) -> Result<u32, IndexError> {
    let bytes: [u8; 4] = b
        .get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .ok_or(IndexError::Truncated)?;
    Ok(u32::from_be_bytes(bytes))
}

fn be16(b: &[u8], at: usize) -> Result<u16, IndexError> {
    let bytes: [u8; 2] = b
        .get(at..at + 2)
        .and_then(|s| s.try_into().ok())
        .ok_or(IndexError::Truncated)?;
    Ok(u16::from_be_bytes(bytes))
}

/// The paths of the gitlink entries of an index (versions 2, 3 and 4). `oid_len` is 20
/// for SHA-1 repositories and 32 for SHA-256 ones.
pub fn gitlinks(index: &[u8], oid_len: usize) -> Result<Vec<Vec<u8>>, IndexError> {
    if index.get(..4) != Some(b"DIRC") {
        return Err(IndexError::NotAnIndex);
    }
    let version = be32(index, 4)?;
    if !(2..=4).contains(&version) {
        return Err(IndexError::Version(version));
    }
    let count = be32(index, 8)?.min(MAX_ENTRIES);
    let mut at = 12;
    let mut previous: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    for _ in 0..count {
        let start = at;
        let mode = be32(index, at + 24)?;
        at += 40 + oid_len;
        let flags = be16(index, at)?;
        at += 2;
        if version >= 3 && flags & 0x4000 != 0 {
            at += 2;
        }
        let name = if version == 4 {
            // A varint of bytes to drop from the previous name, then the rest, NUL-ended.
            let mut strip: usize = 0;
            loop {
                let byte = *index.get(at).ok_or(IndexError::Truncated)?;
                at += 1;
                strip = (strip << 7) | usize::from(byte & 0x7f);
                if byte & 0x80 == 0 {
                    break;
                }
                strip += 1;
            }
            let end = index[at..]
                .iter()
                .position(|&b| b == 0)
                .ok_or(IndexError::Truncated)?;
            let keep = previous
                .len()
                .checked_sub(strip)
                .ok_or(IndexError::Truncated)?;
            let mut name = previous[..keep].to_vec();
            name.extend_from_slice(&index[at..at + end]);
            at += end + 1;
            name
        } else {
            let end = index
                .get(at..)
                .and_then(|rest| rest.iter().position(|&b| b == 0))
                .ok_or(IndexError::Truncated)?;
            let name = index[at..at + end].to_vec();
            // Entries are padded with 1 to 8 NULs to a multiple of 8 bytes.
            let len = at + end - start;
            at = start + (len + 8) / 8 * 8;
            name
        };
        if mode & 0o170000 == GITLINK_MODE {
            out.push(name.clone());
        }
        previous = name;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry_v2(mode: u32, name: &str) -> Vec<u8> {
        let mut e = vec![0u8; 24];
        e.extend_from_slice(&mode.to_be_bytes());
        e.extend_from_slice(&[0u8; 12]);
        e.extend_from_slice(&[0xab; 20]);
        let flags = u16::try_from(name.len()).unwrap();
        e.extend_from_slice(&flags.to_be_bytes());
        e.extend_from_slice(name.as_bytes());
        let padded = (e.len() + 8) / 8 * 8;
        e.resize(padded, 0);
        e
    }

    fn header(version: u32, count: u32) -> Vec<u8> {
        let mut h = b"DIRC".to_vec();
        h.extend_from_slice(&version.to_be_bytes());
        h.extend_from_slice(&count.to_be_bytes());
        h
    }

    #[test]
    fn finds_gitlinks_in_a_version_2_index() {
        let mut index = header(2, 3);
        index.extend(entry_v2(0o100644, "README"));
        index.extend(entry_v2(0o160000, "libs/sub"));
        index.extend(entry_v2(0o100755, "run.sh"));
        index.extend_from_slice(&[0u8; 20]); // checksum
        assert_eq!(gitlinks(&index, 20).unwrap(), vec![b"libs/sub".to_vec()]);
    }

    #[test]
    fn finds_gitlinks_in_a_version_4_index() {
        let mut index = header(4, 2);
        for (mode, strip, suffix) in [(0o100644u32, 0u8, "libs/a.txt"), (0o160000, 5, "sub")] {
            let mut e = vec![0u8; 24];
            e.extend_from_slice(&mode.to_be_bytes());
            e.extend_from_slice(&[0u8; 12]);
            e.extend_from_slice(&[0xcd; 20]);
            e.extend_from_slice(&0u16.to_be_bytes());
            e.push(strip);
            e.extend_from_slice(suffix.as_bytes());
            e.push(0);
            index.extend(e);
        }
        assert_eq!(gitlinks(&index, 20).unwrap(), vec![b"libs/sub".to_vec()]);
    }

    #[test]
    fn rejects_what_is_not_an_index() {
        assert_eq!(gitlinks(b"nope", 20), Err(IndexError::NotAnIndex));
        assert_eq!(gitlinks(&header(9, 0), 20), Err(IndexError::Version(9)));
        assert_eq!(gitlinks(&header(2, 1), 20), Err(IndexError::Truncated));
    }
}
