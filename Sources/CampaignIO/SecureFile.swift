#if canImport(Glibc)
import Glibc
#endif

/// Writes files that may hold keys or device tokens.
public enum SecureFile {
    /// Owner read/write only: for keys and anything holding tokens.
    public static let privateMode: mode_t = 0o600
    /// World-readable: for certificates and other public material.
    public static let publicMode: mode_t = 0o644

    /// Writes `bytes` to `path` atomically (a temporary file in the same
    /// directory, fsynced, then renamed), created with `mode` whatever the umask.
    /// A crash leaves either the old file or the new one, never a torn one.
    public static func write(_ bytes: [UInt8], to path: String, mode: mode_t = privateMode) throws(IOError) {
        let temporary = path + ".tmp-\(getpid())"
        let fd = try syscall("create \(temporary)") { open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode) }
        var ok = false
        defer {
            if !ok { unlink(temporary) }
        }
        do throws(IOError) {
            try syscall("chmod \(temporary)") { fchmod(fd, mode) }
            var offset = 0
            while offset < bytes.count {
                offset += try syscall("write \(temporary)") {
                    bytes.withUnsafeBytes { raw in Glibc.write(fd, raw.baseAddress! + offset, raw.count - offset) }
                }
            }
            try syscall("fsync \(temporary)") { fsync(fd) }
            try syscall("close \(temporary)") { close(fd) }
        } catch {
            close(fd)
            throw error
        }
        try syscall("rename \(temporary) to \(path)") { rename(temporary, path) }
        ok = true
    }

    /// fsyncs the directory that holds `path`, so a rename or a new file in
    /// it survives a power loss.
    public static func syncDirectory(of path: String) throws(IOError) {
        let slash = path.lastIndex(of: "/")
        let directory = slash.map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw IOError(path: directory, reason: "cannot be opened: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        if fsync(fd) != 0, errno != EINVAL {
            throw IOError(path: directory, reason: "fsync failed: \(String(cString: strerror(errno)))")
        }
    }

    /// Creates `path` and its parents when missing.
    public static func makeDirectory(_ path: String, mode: mode_t = 0o755) throws(IOError) {
        var current = path.hasPrefix("/") ? "" : "."
        for part in path.split(separator: "/") {
            current += "/" + part
            if mkdir(current, mode) != 0 && errno != EEXIST {
                throw IOError(operation: "create directory \(current)", errno: errno)
            }
        }
    }
}
