#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Runs a system call that returns -1 with errno on failure, retrying it
/// after EINTR so a signal never surfaces as a spurious error; every EINTR
/// loop goes through here. The error names `path` (when there is one) and
/// the operation.
@discardableResult
package func syscall<T: FixedWidthInteger>(_ operation: @autoclosure () -> String, path: @autoclosure () -> String = "",
                                           _ body: () -> T) throws(IOError) -> T {
    while true {
        let result = body()
        if result != -1 { return result }
        let code = errno
        if code == EINTR { continue }
        throw IOError(path: path(), operation: operation(), errno: code)
    }
}
