#if canImport(Glibc)
import Glibc
#endif
import CampaignIO

/// Something to read bytes from: a file, standard input, or a decompressor.
public protocol ByteSource: AnyObject {
    /// The name used in messages ("-" reads as "standard input").
    var name: String { get }
    /// Reads up to `buffer.count` bytes; 0 means the end.
    func read(into buffer: UnsafeMutableRawBufferPointer) throws(IOError) -> Int
}

extension ByteSource {
    /// Reads into `buffer` from `offset` to its end; 0 means the end of input.
    public func read(into buffer: inout [UInt8], from offset: Int = 0) throws(IOError) -> Int {
        var failure: IOError? = nil
        let n = buffer.withUnsafeMutableBytes { raw -> Int in
            do throws(IOError) {
                return try read(into: UnsafeMutableRawBufferPointer(rebasing: raw[offset...]))
            } catch {
                failure = error
                return 0
            }
        }
        if let failure { throw failure }
        return n
    }
}

/// A file, or standard input for "-".
public final class FileSource: ByteSource {
    public let name: String
    private let fd: Int32
    private let owned: Bool

    public init(path: String) throws(IOError) {
        if path == "-" {
            name = "standard input"
            fd = 0
            owned = false
        } else {
            name = path
            var info = stat()
            if stat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR {
                throw IOError(path: path, reason: "is a directory, not a file")
            }
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                let code = errno
                throw IOError(path: path, reason: code == ENOENT ? "no such file" : String(cString: strerror(code)))
            }
            self.fd = fd
            owned = true
        }
    }

    deinit { if owned { close(fd) } }

    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(IOError) -> Int {
        try syscall("read", path: name) { Glibc.read(fd, buffer.baseAddress, buffer.count) }
    }
}

/// Bytes already read (to sniff the format), then the rest of a source.
public final class PrefixedByteSource: ByteSource {
    public var name: String { rest.name }
    private var prefix: [UInt8]
    private var offset = 0
    private let rest: ByteSource

    public init(prefix: [UInt8], rest: ByteSource) {
        self.prefix = prefix
        self.rest = rest
    }

    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(IOError) -> Int {
        if offset < prefix.count {
            let n = min(buffer.count, prefix.count - offset)
            prefix.withUnsafeBytes { buffer.baseAddress!.copyMemory(from: $0.baseAddress! + offset, byteCount: n) }
            offset += n
            return n
        }
        return try rest.read(into: buffer)
    }
}

/// Bytes in memory, handed out at most `chunkSize` at a time so that readers
/// meet every buffer boundary a pipe could produce (tests and fuzzing).
public final class MemorySource: ByteSource {
    public let name: String
    private let bytes: [UInt8]
    private let chunkSize: Int
    private var offset = 0

    public init(_ bytes: [UInt8], name: String = "memory", chunkSize: Int = .max) {
        self.bytes = bytes
        self.name = name
        self.chunkSize = max(1, chunkSize)
    }

    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(IOError) -> Int {
        let n = min(buffer.count, chunkSize, bytes.count - offset)
        guard n > 0 else { return 0 }
        bytes.withUnsafeBytes { buffer.baseAddress!.copyMemory(from: $0.baseAddress! + offset, byteCount: n) }
        offset += n
        return n
    }
}

/// Opens an input file or "-", decompressing it when it starts with the gzip
/// magic bytes, whatever its name.
public enum InputFile {
    public static func open(_ path: String) throws(IOError) -> ByteSource {
        let file = try FileSource(path: path)
        var head = [UInt8](repeating: 0, count: 2)
        var count = 0
        while count < 2 {
            let n = try file.read(into: &head, from: count)
            if n == 0 { break }
            count += n
        }
        let prefixed = PrefixedByteSource(prefix: Array(head[0..<count]), rest: file)
        if count == 2, head[0] == 0x1F, head[1] == 0x8B {
            return try GzipSource(compressed: prefixed)
        }
        return prefixed
    }
}

/// Reads a whole small file (job files, stores).
public func readWholeFile(_ path: String, limit: Int = 64 << 20) throws(IOError) -> [UInt8] {
    let source = try InputFile.open(path)
    var out: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65_536)
    while true {
        let n = try source.read(into: &chunk)
        if n == 0 { return out }
        out += chunk[0..<n]
        if out.count > limit { throw IOError(path: path, reason: "is larger than \(limit >> 20) MiB") }
    }
}
