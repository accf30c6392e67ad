#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A failed system call, with the operation and errno.
public struct SystemError: Error, Hashable, Sendable, CustomStringConvertible {
    public var operation: String
    public var errno: Int32

    public init(operation: String, errno: Int32) {
        self.operation = operation
        self.errno = errno
    }

    public var description: String {
        "\(operation) failed: \(String(cString: strerror(errno)))."
    }
}

/// Runs a system call that returns -1 and sets errno on failure, retrying
/// after EINTR so a signal never surfaces as a spurious error.
@discardableResult
@inline(__always)
package func syscall<T: FixedWidthInteger>(_ operation: @autoclosure () -> String, _ body: () -> T) throws(SystemError) -> T {
    while true {
        let result = body()
        if result != -1 { return result }
        let code = errno
        if code == EINTR { continue }
        throw SystemError(operation: operation(), errno: code)
    }
}
