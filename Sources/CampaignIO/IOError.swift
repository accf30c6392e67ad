#if canImport(Glibc)
import Glibc
#endif

/// A failure reading or writing a file, or of any system call: the project's
/// one I/O error. Names the file (when there is one) and says what failed.
public struct IOError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The file or directory; empty for a call on no file (a pipe, a socket).
    public var path: String
    public var reason: String
    /// The system's error number, when a system call failed.
    public var errno: Int32?

    public init(path: String, reason: String) {
        self.path = path
        self.reason = reason
    }

    /// A failed system call: `operation failed: <strerror>`.
    public init(path: String = "", operation: String, errno code: Int32) {
        self.init(path: path, reason: "\(operation) failed: \(String(cString: strerror(code)))")
        errno = code
    }

    public var description: String { path.isEmpty ? "\(reason)." : "\(path): \(reason)." }
}
