#if canImport(Glibc)
import Glibc
#endif
internal import CIOShims
import CampaignIO

/// Appends to a file, or standard output for "-", through a buffer. Files are
/// created with the given mode whatever the umask: 0600 for anything holding
/// tokens.
public final class BufferedFileWriter {
    /// The name for messages.
    public let name: String
    private let fd: Int32
    private let owned: Bool
    public var buffer: [UInt8] = []
    public let flushThreshold: Int
    /// Whether written data is sent to disk as it goes (see `init`).
    private let writeBehind: Bool
    private var written: Int64 = 0
    private var writtenBack: Int64 = 0
    /// How much is written between two write-backs.
    static let writeBehindStep: Int64 = 8 << 20

    /// With `writeBehind`, a regular file's data is handed to the disk every
    /// few megabytes as it is written, without waiting, so that ``sync()`` at
    /// the end has little left to wait for (the fsync of a plan of a million
    /// records took 0.6 s on its own).
    public init(path: String, mode: Glibc.mode_t = SecureFile.privateMode, append: Bool = false, flushThreshold: Int = 1 << 16,
                writeBehind: Bool = false) throws(IOError) {
        self.flushThreshold = flushThreshold
        buffer.reserveCapacity(flushThreshold * 2)
        if path == "-" {
            name = "standard output"
            fd = 1
            owned = false
            self.writeBehind = false
            return
        }
        name = path
        let fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), mode)
        guard fd >= 0 else { throw IOError(path: path, reason: "cannot be created: \(String(cString: strerror(errno)))") }
        // Only a regular file gets the mode: a run as root writing to
        // /dev/null must not make it 0600 for everyone else.
        var info = stat()
        let regular = fstat(fd, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG
        if regular { fchmod(fd, mode) }
        self.writeBehind = writeBehind && regular && !append
        self.fd = fd
        owned = true
    }

    deinit {
        try? flush()
        if owned { close(fd) }
    }

    /// Writes the buffer out when it has grown past the threshold.
    @inline(__always)
    public func flushIfFull() throws(IOError) {
        if buffer.count >= flushThreshold { try flush() }
    }

    public func flush() throws(IOError) {
        var failure: IOError? = nil
        buffer.withUnsafeBytes { bytes in
            do throws(IOError) { try writeAll(bytes) } catch { failure = error }
        }
        if let failure { throw failure }
        buffer.removeAll(keepingCapacity: true)
    }

    /// Writes `bytes` straight to the file, after what is buffered.
    public func write(_ bytes: UnsafeRawBufferPointer) throws(IOError) {
        try flush()
        try writeAll(bytes)
    }

    private func writeAll(_ bytes: UnsafeRawBufferPointer) throws(IOError) {
        var offset = 0
        while offset < bytes.count {
            offset += try syscall("write", path: name) { Glibc.write(fd, bytes.baseAddress! + offset, bytes.count - offset) }
        }
        written += Int64(bytes.count)
        if writeBehind, written - writtenBack >= Self.writeBehindStep {
            // Advice only: a failure here leaves the work to sync().
            _ = campaign_start_writeback(fd, writtenBack, written - writtenBack)
            writtenBack = written
        }
    }

    /// fsyncs what has been written, without touching the buffer: safe from
    /// another thread while this one goes on appending (the buffer is not
    /// thread-safe; the descriptor is).
    public func syncWritten() throws(IOError) {
        if owned, fsync(fd) != 0, errno != EINVAL {
            throw IOError(path: name, operation: "fsync", errno: errno)
        }
    }

    /// Hands everything written so far to the disk without waiting (write-behind files only), so a
    /// ``sync()`` that follows, here or on another file, waits for less.
    public func startWriteBack() {
        guard writeBehind, written > writtenBack else { return }
        _ = campaign_start_writeback(fd, writtenBack, written - writtenBack)
        writtenBack = written
    }

    /// Flushes and asks the kernel to put the data on disk (a no-op for pipes).
    public func sync() throws(IOError) {
        try flush()
        if owned, fsync(fd) != 0, errno != EINVAL {
            throw IOError(path: name, operation: "fsync", errno: errno)
        }
    }
}
