//! Writing a capture as the reference writes it: Python's `json.dumps(sort_keys=True,
//! indent=2, ensure_ascii=False)` text, a private directory, an atomic file.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::Value;
use time::OffsetDateTime;

use super::CaptureError;

/// `value` with every object's keys sorted, pretty-printed with two spaces: the text of
/// Python's `json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False)`.
pub(super) fn python_json(value: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&map[k])))
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    serde_json::to_string_pretty(&sorted(value)).unwrap_or_default()
}

/// Python's `datetime.isoformat()` of a UTC time with `+00:00` as `Z` (no fraction when the
/// microseconds are zero).
pub(super) fn isoformat_z(at: OffsetDateTime) -> String {
    let at = at.to_offset(time::UtcOffset::UTC);
    let base = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    );
    match at.microsecond() {
        0 => format!("{base}Z"),
        micros => format!("{base}.{micros:06}Z"),
    }
}

/// Whether `text` reads as an ISO 8601 time as Python's `fromisoformat` (with `Z`) reads one.
pub(super) fn is_isoformat(text: &str) -> bool {
    let text = text.replace('Z', "+00:00");
    time::OffsetDateTime::parse(&text, &time::format_description::well_known::Rfc3339).is_ok()
        || time::PrimitiveDateTime::parse(
            &text,
            time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]"),
        )
        .is_ok()
}

/// Writes `data` as `<%Y%m%dT%H%M%S%fZ>-<uuid>.json` in `directory` (made `0700` when
/// missing): a `0600` temporary file created exclusively (`O_CREAT | O_EXCL`, which never
/// follows a link planted at its name), synced, renamed into place, the directory synced.
pub(super) fn write_private(
    directory: &Path,
    captured_at: OffsetDateTime,
    data: &[u8],
) -> Result<PathBuf, CaptureError> {
    ensure_private_directory(directory)?;
    let at = captured_at.to_offset(time::UtcOffset::UTC);
    let stamp = format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}{:06}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second(),
        at.microsecond()
    );
    for _ in 0..10 {
        let name = format!("{stamp}-{}.json", uuid::Uuid::new_v4().simple());
        let target = directory.join(&name);
        if target.symlink_metadata().is_ok() {
            continue;
        }
        let temp = directory.join(format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple()));
        let written = (|| {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&temp)?;
            file.write_all(data)?;
            file.sync_all()?;
            std::fs::rename(&temp, &target)?;
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600))?;
            std::fs::File::open(directory)?.sync_all()
        })();
        let _ = std::fs::remove_file(&temp);
        written?;
        return Ok(target);
    }
    Err(CaptureError::Invalid(
        "could not allocate a unique capture filename".into(),
    ))
}

/// Creates the missing directories of `path` with mode `0700`; the deepest existing one must
/// be a directory and not a symbolic link, as the reference checks.
fn ensure_private_directory(path: &Path) -> Result<(), CaptureError> {
    let absolute = std::path::absolute(path)?;
    let mut missing = Vec::new();
    let mut current = absolute.as_path();
    loop {
        match current.symlink_metadata() {
            Ok(info) if info.file_type().is_symlink() => {
                return Err(CaptureError::Invalid(format!(
                    "capture directory contains a symbolic link: {}",
                    current.display()
                )));
            }
            Ok(info) if !info.is_dir() => {
                return Err(CaptureError::Invalid(format!(
                    "capture directory is not a directory: {}",
                    current.display()
                )));
            }
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => missing.push(current.to_owned()),
            Err(e) => return Err(e.into()),
        }
        current = current.parent().ok_or_else(|| {
            CaptureError::Invalid(format!("no existing parent of {}", path.display()))
        })?;
    }
    for directory in missing.iter().rev() {
        std::fs::DirBuilder::new().mode(0o700).create(directory)?;
        std::fs::set_permissions(directory, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_text_is_pythons_sorted_indented_dump() {
        let value = serde_json::json!({"b": [1, {"d": "é", "c": []}], "a": {}});
        assert_eq!(
            python_json(&value),
            "{\n  \"a\": {},\n  \"b\": [\n    1,\n    {\n      \"c\": [],\n      \"d\": \"é\"\n    }\n  ]\n}"
        );
    }

    #[test]
    fn times_are_python_isoformat_with_z() {
        let at = time::macros::datetime!(2026-12-03 06:26:14.570127 UTC);
        assert_eq!(isoformat_z(at), "2026-12-03T06:26:14.570127Z");
        let whole = time::macros::datetime!(2026-12-03 06:26:14 UTC);
        assert_eq!(isoformat_z(whole), "2026-12-03T06:26:14Z");
        assert!(is_isoformat("2026-12-03T06:26:14.570127Z"));
        assert!(is_isoformat("2026-12-03T06:26:14Z"));
        assert!(!is_isoformat("yesterday"));
    }
}
