#if canImport(Glibc)
import Glibc
#endif
import ByteStreams
import CampaignIO

/// Appends one send's entries to its own segment of a ledger directory.
/// Each append is one block written with one write(2): a killed process
/// leaves it with the kernel (``sync()`` makes it survive a power loss); a
/// torn last block is cut off when the segment is opened again.
public final class LedgerSegmentWriter: @unchecked Sendable {
    public let path: String
    public let campaign: UInt32
    private var fd: Int32
    private let lock = Lock()
    /// Entries appended by this process.
    public private(set) var appended = 0

    /// Opens (creating the directory and segment, 0600) the segment `name`
    /// of `directory`, cuts off a torn tail, and writes the campaign's names block.
    public init(directory: String, name: String, campaign: String, scope: String) throws(LedgerError) {
        if mkdir(directory, 0o700) != 0, errno != EEXIST {
            throw LedgerError(path: directory, reason: "cannot be created: \(String(cString: strerror(errno)))", writing: true, errno: errno)
        }
        path = "\(directory)/\(name)"
        self.campaign = LedgerFormat.nameID(campaign)
        // Held open and locked (flock: this machine's prune skips it) for the send;
        // a prune that renamed a new file over it meanwhile: open that one.
        var opened: Int32 = -1
        while true {
            opened = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            guard opened >= 0 else { throw LedgerError(path: path, reason: "cannot be opened: \(String(cString: strerror(errno)))", writing: true, errno: errno) }
            // Bounded: a segment another process holds (this journal's send
            // still running) is an error, never a wait without end.
            var waited = 0
            while flock(opened, LOCK_EX | LOCK_NB) != 0 {
                guard (errno == EWOULDBLOCK || errno == EINTR), waited < 200 else {
                    Glibc.close(opened)
                    throw LedgerError(path: path, reason: "is held by another send on this machine for 10 s (is a send of the same journal still running?)")
                }
                usleep(50_000)
                waited += 1
            }
            var mine = stat(), named = stat()
            if fstat(opened, &mine) == 0, stat(path, &named) == 0, mine.st_ino == named.st_ino { break }
            Glibc.close(opened)
        }
        fd = opened
        do {
            let good = LedgerScanner.validLength(fd: fd)
            if good == 0 {
                _ = ftruncate(fd, 0)
                try write(LedgerFormat.fileHeader(), at: 0)
            } else {
                _ = ftruncate(fd, off_t(good))
            }
            try write(LedgerFormat.block(kind: .names, payload: LedgerFormat.namesPayload([(self.campaign, campaign, scope)])),
                      at: Int(lseek(fd, 0, SEEK_END)))
        } catch {
            Glibc.close(fd)
            throw error
        }
    }

    deinit { close() }

    /// Whether a send can keep its segment in `directory`: made (0700) when
    /// missing, and a directory this process may write; else the error it would meet.
    public static func checkDirectory(_ directory: String) throws(LedgerError) {
        if mkdir(directory, 0o700) != 0, errno != EEXIST {
            throw LedgerError(path: directory, reason: "cannot be created as a ledger directory: \(String(cString: strerror(errno)))", writing: true, errno: errno)
        }
        var info = stat()
        guard stat(directory, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR else {
            throw LedgerError(path: directory, reason: "is not a directory: a ledger is a directory of segments", writing: true, errno: ENOTDIR)
        }
        guard access(directory, W_OK | X_OK) == 0 else {
            throw LedgerError(path: directory, reason: "cannot be written: \(String(cString: strerror(errno)))", writing: true, errno: errno)
        }
    }

    /// Closes the segment (and releases its lock); appends after this fail.
    /// A send closes it at the end of each run: a waiting scheduled send's
    /// next run opens it again.
    public func close() {
        lock.lock()
        defer { lock.unlock() }
        if fd >= 0 { Glibc.close(fd); fd = -1 }
    }

    private func write(_ bytes: [UInt8], at offset: Int) throws(LedgerError) {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress! + done, bytes.count - done, off_t(offset + done)) }
            if n < 0 {
                if errno == EINTR { continue }
                throw LedgerError(path: path, reason: "cannot be written: \(String(cString: strerror(errno)))", writing: true, errno: errno)
            }
            done += n
        }
    }

    /// Appends entries (token hash, UNIX seconds) of this campaign, in blocks of at most 65,536.
    public func append(hashes: [UInt64], seconds: UInt32, kind: LedgerFormat.BlockKind = .entries) throws(LedgerError) {
        precondition(kind.holdsEntries)
        guard !hashes.isEmpty else { return }
        lock.lock()
        defer { lock.unlock() }
        guard fd >= 0 else { throw LedgerError(path: path, reason: "was closed at the end of its run") }
        var start = 0
        while start < hashes.count {
            let end = min(hashes.count, start + LedgerFormat.maxEntriesPerBlock)
            var payload: [UInt8] = []
            payload.reserveCapacity((end - start) * LedgerFormat.entryBytes)
            for h in hashes[start..<end] { LedgerFormat.appendEntry(hash: h, campaign: campaign, seconds: seconds, to: &payload) }
            try write(LedgerFormat.block(kind: kind, payload: payload), at: Int(lseek(fd, 0, SEEK_END)))
            start = end
        }
        appended += hashes.count
    }

    /// fsyncs what was appended.
    public func sync() throws(LedgerError) {
        lock.lock()
        defer { lock.unlock() }
        guard fd >= 0 else { return }
        guard fsync(fd) == 0 else { throw LedgerError(path: path, reason: "cannot be synced: \(String(cString: strerror(errno)))") }
    }
}

/// Reads a segment's blocks in order, with a bounded buffer.
public enum LedgerScanner {
    /// Calls `body` with each whole, checked block of the segment open at `fd`
    /// (from offset 0); stops at the first torn one (a header that cannot be
    /// read, or a block running past the end). A whole block whose checksum
    /// fails is skipped, told to `corrupt` with its entries, and the scan goes
    /// on: one bad byte must not lose every entry after it. Returns the length
    /// of the readable prefix (0: not a segment).
    ///
    /// From `offset` (a block boundary a previous scan returned) the file
    /// header is not looked for; with `tailMayBeGrowing`, a last block whose
    /// checksum fails ends the scan instead of being skipped: another
    /// process may be writing it (its write seen in part), so it is read again later.
    @discardableResult
    public static func scan(fd: Int32, from offset: Int = 0, checkCRC: Bool = true, tailMayBeGrowing: Bool = false,
                            _ body: (LedgerFormat.BlockKind, UnsafeRawBufferPointer) -> Void = { _, _ in },
                            corrupt: (_ entries: Int) -> Void = { _ in }) -> Int {
        let capacity = 8 << 20
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
        defer { buffer.deallocate() }
        var filled = 0, consumed = 0, fileOffset = offset
        var eof = false
        func refill() {
            if consumed > 0 {
                memmove(buffer, buffer + consumed, filled - consumed)
                filled -= consumed
                consumed = 0
            }
            while !eof && filled < capacity {
                let n = pread(fd, buffer + filled, capacity - filled, off_t(fileOffset))
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { eof = true; break }
                filled += n
                fileOffset += n
            }
        }
        refill()
        var valid = offset
        if offset == 0 {
            guard filled >= LedgerFormat.fileHeaderBytes,
                  LedgerFormat.isFileHeader(UnsafeRawBufferPointer(start: buffer, count: LedgerFormat.fileHeaderBytes)) else { return 0 }
            consumed = LedgerFormat.fileHeaderBytes
            valid = consumed
        }
        while true {
            if filled - consumed < LedgerFormat.blockHeaderBytes + LedgerFormat.maxBlockPayload && !eof { refill() }
            guard filled - consumed >= LedgerFormat.blockHeaderBytes else { break }
            let h = buffer + consumed
            guard let kind = LedgerFormat.BlockKind(rawValue: h.load(as: UInt8.self)) else { break }
            let length = Int(h.loadUnaligned(fromByteOffset: 4, as: UInt32.self).littleEndian)
            guard length <= LedgerFormat.maxBlockPayload, filled - consumed >= LedgerFormat.blockHeaderBytes + length,
                  !kind.holdsEntries || length % LedgerFormat.entryBytes == 0 else { break }
            let payload = UnsafeRawBufferPointer(start: h + LedgerFormat.blockHeaderBytes, count: length)
            var intact = true
            if checkCRC {
                var crc = CRC32()
                crc.update(payload)
                intact = crc.value == h.loadUnaligned(fromByteOffset: 8, as: UInt32.self).littleEndian
            }
            if !intact, tailMayBeGrowing, eof, consumed + LedgerFormat.blockHeaderBytes + length == filled { break }
            if intact { body(kind, payload) } else { corrupt(kind.holdsEntries ? length / LedgerFormat.entryBytes : 0) }
            consumed += LedgerFormat.blockHeaderBytes + length
            valid += LedgerFormat.blockHeaderBytes + length
        }
        return valid
    }

    static func validLength(fd: Int32) -> Int { scan(fd: fd) }
}
