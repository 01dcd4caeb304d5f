//! Every file one command writes, as one transaction: each is written to a temporary file beside
//! its destination, and only when all were written are they renamed into place, together, under
//! a lock on their folders. A failure (full disk, unwritable folder, a signal) leaves the previous
//! outputs as they were; two runs writing the same paths never pair one's model with the other's
//! report or external data.
//!
//! | hazard | what prevents it |
//! |---|---|
//! | a write fails half way | nothing is renamed; the temporaries are removed ([`Outputs`]'s `Drop`) |
//! | SIGINT / SIGTERM | the CLI's handler calls [`remove_pending_then_exit`]: a temporary is created and listed under one lock, which the handler holds until the process ends, so none is created unlisted or after the removal |
//! | SIGKILL | temporaries are named `.qdqc-<pid>-*.tmp`; the next run removes those of dead processes |
//! | two runs, same paths | renames happen under an exclusive `flock` of every destination folder |

use crate::error::{Error, Result};
use std::collections::BTreeSet;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Temporary files of this process not yet renamed into place.
static PENDING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Removes every temporary file this process has staged and not renamed, then exits with `code`
/// (a signal handler's job). The list stays locked until the process ends: a thread about to
/// create a temporary ([`Outputs::stage`], [`Outputs::check_writable`]) waits on it, so no file
/// appears after the removal.
pub fn remove_pending_then_exit(code: i32) -> ! {
    let mut pending = PENDING.lock().unwrap_or_else(|e| e.into_inner());
    for p in pending.drain(..) {
        let _ = std::fs::remove_file(p);
    }
    std::process::exit(code)
}

/// The removal of [`remove_pending_then_exit`] for a process that cannot wait: out of memory, the list may be locked by
/// the very allocation that failed (then the next run removes the files).
pub fn remove_pending_unless_busy() {
    if let Ok(mut pending) = PENDING.try_lock() {
        for p in pending.drain(..) {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn forget(tmp: &Path) {
    PENDING.lock().unwrap_or_else(|e| e.into_inner()).retain(|p| p != tmp);
}

/// The folder a path is written into.
pub fn folder(path: &Path) -> &Path {
    path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// Files staged for one command, renamed into place by [`Outputs::commit`] in staging order.
#[derive(Default)]
pub struct Outputs {
    staged: Vec<(PathBuf, PathBuf)>,
}

impl Outputs {
    /// Fails (as an I/O error on `path`) unless a file can be created in `path`'s folder: checked
    /// for every output before any work, so a bad `--report` folder costs no compile.
    pub fn check_writable(path: &Path) -> Result<()> {
        // Under the list's lock, so that a signal cannot end the process while the probe exists.
        let _pending = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        temporary(path).map(drop)
    }

    /// Writes `bytes` to a temporary file beside `path` (synced, mode 0644).
    pub fn stage(&mut self, path: &Path, bytes: &[u8]) -> Result<()> {
        self.stage_parts(path, &[bytes])
    }

    /// Writes the concatenation of `parts` (written one after the other, never joined in
    /// memory) to a temporary file beside `path`.
    pub fn stage_parts(&mut self, path: &Path, parts: &[impl AsRef<[u8]>]) -> Result<()> {
        let dir = folder(path);
        remove_stale(dir);
        let (mut file, tmp_path) = registered(path)?;
        self.staged.push((tmp_path, path.to_path_buf()));
        for part in parts {
            file.write_all(part.as_ref()).map_err(|e| Error::io(path, &e))?;
        }
        // Temporary files are created 0600; a compiled model is an ordinary file.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(std::fs::Permissions::from_mode(0o644)).map_err(|e| Error::io(path, &e))?;
        }
        file.sync_all().map_err(|e| Error::io(path, &e))
    }

    /// Renames every staged file into place, in staging order, holding an exclusive lock on each
    /// destination folder (taken in sorted order, so two runs cannot deadlock).
    pub fn commit(mut self) -> Result<()> {
        let dirs: BTreeSet<PathBuf> = self.staged.iter().map(|(_, dest)| folder(dest).to_path_buf()).collect();
        let mut locks = Vec::new();
        for d in &dirs {
            let lock = File::open(d).map_err(|e| Error::io(d, &e))?;
            lock.lock().map_err(|e| Error::io(d, &e))?;
            locks.push(lock);
        }
        for (tmp, dest) in std::mem::take(&mut self.staged) {
            let renamed = std::fs::rename(&tmp, &dest);
            forget(&tmp);
            if let Err(e) = renamed {
                let _ = std::fs::remove_file(&tmp);
                return Err(Error::io(&dest, &e));
            }
        }
        drop(locks);
        Ok(())
    }
}

impl Drop for Outputs {
    /// An uncommitted transaction leaves nothing behind.
    fn drop(&mut self) {
        for (tmp, _) in self.staged.drain(..) {
            let _ = std::fs::remove_file(&tmp);
            forget(&tmp);
        }
    }
}

/// Refuses (bad input) a write path that is one of the input files, or two writes to one file:
/// `-o` equal to the input or to one of its external data files, `--report` equal to `-o`, …
/// Each path comes with what it is, for the message.
pub fn check_distinct(inputs: &[(&str, PathBuf)], writes: &[(&str, PathBuf)]) -> Result<()> {
    for (i, (what, w)) in writes.iter().enumerate() {
        if let Some((is, _)) = inputs.iter().find(|(_, p)| same_file(w, p)) {
            return Err(Error::bad_input(w, format!("{what} is {is}; refusing to overwrite it")));
        }
        if let Some((other, _)) = writes[..i].iter().find(|(_, p)| same_file(w, p)) {
            return Err(Error::bad_input(w, format!("{other} and {what} name the same file")));
        }
    }
    Ok(())
}

/// Whether two paths name one file: the same device and inode when both exist (links resolved),
/// else the same canonical folder and file name.
fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(x), Ok(y)) => return (x.dev(), x.ino()) == (y.dev(), y.ino()),
            (Ok(_), Err(_)) | (Err(_), Ok(_)) => return false,
            _ => {}
        }
    }
    let canonical = |p: &Path| Some(folder(p).canonicalize().ok()?.join(p.file_name()?));
    match (canonical(a), canonical(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// A new temporary file beside `path`, kept (not removed on drop) and listed in [`PENDING`]: created
/// under the list's lock, so a signal handler ([`remove_pending_then_exit`]) either runs first
/// (and the file is never created) or sees it listed.
fn registered(path: &Path) -> Result<(File, PathBuf)> {
    let mut pending = PENDING.lock().unwrap_or_else(|e| e.into_inner());
    let (file, tmp) = temporary(path)?.keep().map_err(|e| Error::io(path, &e.error))?;
    pending.push(tmp.clone());
    Ok((file, tmp))
}

/// A new temporary file beside `path`; the error names `path`'s folder, never the temporary.
fn temporary(path: &Path) -> Result<tempfile::NamedTempFile> {
    let dir = folder(path);
    tempfile::Builder::new().prefix(&prefix()).suffix(".tmp").tempfile_in(dir).map_err(|e| {
        // tempfile appends " at path <the temporary>" to the OS error.
        let shown = e.to_string();
        let os = shown.split(" at path ").next().unwrap_or(&shown);
        Error { kind: crate::ErrorKind::Io, file: path.to_path_buf(), node: None, problem: format!("cannot create a file in folder '{}': {os}", dir.display()) }
    })
}

/// `.qdqc-<pid>-`: the process that owns a temporary file, so a later run knows a stale one.
fn prefix() -> String {
    format!(".qdqc-{}-", std::process::id())
}

/// Removes `.qdqc-<pid>-*.tmp` files in `dir` whose process is gone (killed by SIGKILL, which no
/// handler sees). Only on Linux, where `/proc/<pid>` says whether a process lives.
fn remove_stale(dir: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(".qdqc-")?.strip_suffix(".tmp")?.split_once('-')?.0.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_renamed_before_commit_and_nothing_left_after_drop() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, b"old").unwrap();
        let mut out = Outputs::default();
        out.stage(&a, b"new a").unwrap();
        out.stage(&b, b"new b").unwrap();
        assert_eq!(std::fs::read(&a).unwrap(), b"old");
        drop(out);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("a")]);
        assert_eq!(std::fs::read(&a).unwrap(), b"old");
    }

    /// What makes SIGINT leave nothing behind: no temporary (the writability probe or a staged
    /// file) is created while the signal handler holds the list, which it keeps until the
    /// process ends. Here the test holds it: neither call creates a file until it is released.
    #[test]
    fn no_temporary_is_created_while_the_list_is_held() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a");
        let created = || std::fs::read_dir(dir.path()).unwrap().count();
        for probe in [true, false] {
            let held = PENDING.lock().unwrap();
            std::thread::scope(|s| {
                let writer = s.spawn(|| if probe { Outputs::check_writable(&path) } else { Outputs::default().stage(&path, b"x") });
                std::thread::sleep(std::time::Duration::from_millis(200));
                assert_eq!(created(), 0, "a temporary created while the list was held (probe: {probe})");
                assert!(!writer.is_finished(), "the call did not wait for the list (probe: {probe})");
                drop(held);
                // The probe is removed at once, the staged file when its uncommitted `Outputs` drops.
                writer.join().unwrap().unwrap();
            });
            assert_eq!(created(), 0);
        }
    }

    #[test]
    fn commit_renames_every_file() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let mut out = Outputs::default();
        out.stage(&a, b"1").unwrap();
        out.stage(&b, b"2").unwrap();
        out.commit().unwrap();
        assert_eq!((std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap()), (b"1".to_vec(), b"2".to_vec()));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    #[test]
    fn a_write_onto_an_input_or_onto_another_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (model, data) = (dir.path().join("m.onnx"), dir.path().join("m.onnx.data"));
        std::fs::write(&model, b"m").unwrap();
        std::fs::write(&data, b"d").unwrap();
        std::os::unix::fs::symlink(&model, dir.path().join("link.onnx")).unwrap();
        let inputs = [("the input model", model.clone()), ("the input's external data file", data.clone())];
        let out = dir.path().join("out.onnx");
        let refuse = |writes: &[(&str, PathBuf)]| check_distinct(&inputs, writes).unwrap_err().problem;
        assert!(refuse(&[("-o", model.clone())]).contains("-o is the input model"));
        assert!(refuse(&[("-o", dir.path().join("link.onnx"))]).contains("-o is the input model"), "through a symlink");
        assert!(refuse(&[("-o", dir.path().join(".").join("m.onnx.data"))]).contains("is the input's external data file"));
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        assert!(refuse(&[("-o", out.clone()), ("--report", dir.path().join("sub/../out.onnx"))]).contains("-o and --report name the same file"));
        assert!(check_distinct(&inputs, &[("-o", out), ("--report", dir.path().join("r.json"))]).is_ok());
    }

    #[test]
    fn a_dead_process_temporary_is_removed_a_live_one_kept() {
        let dir = tempfile::tempdir().unwrap();
        // pid_max on Linux is at most 2^22: this pid cannot be alive.
        let dead = dir.path().join(".qdqc-4294967-abc.tmp");
        let live = dir.path().join(format!(".qdqc-{}-abc.tmp", std::process::id()));
        std::fs::write(&dead, b"x").unwrap();
        std::fs::write(&live, b"x").unwrap();
        remove_stale(dir.path());
        assert!(!dead.exists() && live.exists());
    }
}
