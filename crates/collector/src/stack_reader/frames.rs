//! py-spy's frames stripped to what may be shown: no directory of the
//! user's, no locals.

use super::raw::RawFrame;

/// Installed code: the standard library, site- or dist-packages, frozen
/// modules. Everything else is the user's own.
pub fn is_library(path: &str) -> bool {
    path.starts_with("<frozen")
        || path.contains("/site-packages/")
        || path.contains("/dist-packages/")
        || ["/lib/python", "/lib64/python"].iter().any(|dir| {
            path.find(dir).is_some_and(|at| {
                // `/lib/python3.11/...`: the version's digits follow.
                path[at + dir.len()..].starts_with(|c: char| c.is_ascii_digit())
            })
        })
}

/// The file name to show: py-spy's package-relative name (`PIL/Image.py`,
/// `data.py`), or the last component when it has none. Never absolute.
pub fn shown_file(filename: &str, short: Option<&str>) -> String {
    let name = short.unwrap_or(filename);
    if name.starts_with('/') || name.is_empty() {
        filename.rsplit('/').next().unwrap_or("").to_owned()
    } else {
        name.to_owned()
    }
}

/// At most `chars` characters of `name`.
fn prefix(name: &str, chars: usize) -> String {
    match name.char_indices().nth(chars) {
        Some((at, _)) => name[..at].to_owned(),
        None => name.to_owned(),
    }
}

/// py-spy's frame as it may be shown, names at most `chars` characters.
pub fn frame(f: &py_spy::Frame, chars: usize) -> RawFrame {
    RawFrame {
        function: prefix(&f.name, chars),
        file: prefix(&shown_file(&f.filename, f.short_filename.as_deref()), chars),
        line: u32::try_from(f.line).unwrap_or(0),
        library: is_library(&f.filename),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_code_is_told_from_the_users() {
        for lib in [
            "/usr/lib/python3.11/threading.py",
            "/root/.pyenv/versions/3.11.7/lib/python3.11/queue.py",
            "/home/alice/venv/lib/python3.12/site-packages/PIL/Image.py",
            "/usr/lib/python3/dist-packages/numpy/core/numeric.py",
            "/opt/conda/lib64/python3.10/selectors.py",
            "<frozen importlib._bootstrap>",
        ] {
            assert!(is_library(lib), "{lib}");
        }
        for own in [
            "/home/alice/project/data.py",
            "/srv/lib/pythonic/train.py",
            "<string>",
            "train.py",
        ] {
            assert!(!is_library(own), "{own}");
        }
    }

    #[test]
    fn shown_files_never_carry_a_directory_of_the_users() {
        assert_eq!(
            shown_file("/x/site-packages/PIL/Image.py", Some("PIL/Image.py")),
            "PIL/Image.py"
        );
        assert_eq!(
            shown_file("/home/alice/secret/data.py", Some("data.py")),
            "data.py"
        );
        assert_eq!(shown_file("/home/alice/secret/data.py", None), "data.py");
        assert_eq!(
            shown_file(
                "/home/alice/secret/data.py",
                Some("/home/alice/secret/data.py")
            ),
            "data.py"
        );
        assert_eq!(shown_file("<string>", Some("<string>")), "<string>");
    }
}
