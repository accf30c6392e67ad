#if canImport(Glibc)
import Glibc
#endif
import CampaignIO

/// `campaign ledger prune` and `campaign ledger stats`.
public enum LedgerMaintenance {
    public struct PruneResult: Sendable, Equatable {
        public var segments = 0, rewritten = 0, removed = 0, busy = 0
        public var entriesKept = 0, entriesDropped = 0
    }

    /// Rewrites every segment without the entries older than `cutoff` (UNIX
    /// seconds): a new file beside it, fsynced and renamed over it, so a crash
    /// leaves the old segment or the new one. A segment left with no entry is
    /// removed. A segment a send still has open (its lock taken) is left for
    /// the next prune.
    /// The segments of a ledger that must exist: a plan may name a ledger no
    /// send has made yet, but describing or pruning one that is not there is
    /// a mistyped path, not an empty ledger.
    static func existingSegments(of directory: String) throws(LedgerError) -> [String] {
        var st = stat()
        guard stat(directory, &st) == 0 else {
            throw LedgerError(path: directory, reason: "no such ledger directory (`campaign send --ledger DIR` makes one)")
        }
        return try LedgerReader.segments(of: directory)
    }

    public static func prune(directory: String, olderThan cutoff: UInt32) throws -> PruneResult {
        var result = PruneResult()
        for path in try existingSegments(of: directory) {
            result.segments += 1
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { throw LedgerError(path: path, reason: "cannot be read: \(String(cString: strerror(errno)))") }
            defer { close(fd) }
            guard flock(fd, LOCK_EX | LOCK_NB) == 0 else { result.busy += 1; continue }
            var out = LedgerFormat.fileHeader()
            var kept = 0, dropped = 0, newest: UInt32 = 0
            LedgerScanner.scan(fd: fd) { kind, payload in
                switch kind {
                case .names:
                    out += LedgerFormat.block(kind: .names, payload: Array(payload))
                case .entries, .claims, .proofs:
                    var keep: [UInt8] = []
                    let count = payload.count / LedgerFormat.entryBytes
                    for i in 0..<count {
                        let e = UnsafeRawBufferPointer(rebasing: payload[(i * 16)..<(i * 16 + 16)])
                        let t = e.loadUnaligned(fromByteOffset: 12, as: UInt32.self).littleEndian
                        if t >= cutoff { keep += e; kept += 1; newest = max(newest, t) } else { dropped += 1 }
                    }
                    if !keep.isEmpty { out += LedgerFormat.block(kind: kind, payload: keep) }
                }
            }
            result.entriesKept += kept
            result.entriesDropped += dropped
            if kept == 0 {
                guard unlink(path) == 0 else { throw LedgerError(path: path, reason: "cannot be removed: \(String(cString: strerror(errno)))") }
                result.removed += 1
            } else if dropped > 0 {
                do { try SecureFile.write(out, to: path, mode: 0o600) } catch { throw LedgerError(path: path, reason: "\(error)") }
                // Its time stays its newest entry's, so plans may still skip it by time (LedgerReader.canSkip).
                setModificationTime(path, seconds: newest + 1)
                result.rewritten += 1
            }
        }
        if result.rewritten + result.removed > 0 { try? SecureFile.syncDirectory(of: directory + "/.") }
        return result
    }

    public struct CampaignStats: Sendable, Equatable {
        public var name: String, scope: String
        /// Notifications recorded as accepted (or presumed delivered).
        public var entries = 0
        /// Notifications claimed before they were written (a send with a frequencyCap), proven or not.
        public var claims = 0
        public var oldest = UInt32.max, newest: UInt32 = 0
    }

    public struct Stats: Sendable {
        public var segments = 0, bytes = 0, entries = 0, claims = 0, tornSegments = 0
        /// Entries in blocks whose checksum fails, and the segments holding them.
        public var corruptEntries = 0
        public var corruptSegments: [String] = []
        public var campaigns: [UInt32: CampaignStats] = [:]
    }

    /// Segments, bytes, entries, and per campaign its scope, entries and time span.
    public static func stats(directory: String) throws -> Stats {
        var s = Stats()
        for path in try existingSegments(of: directory) {
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { throw LedgerError(path: path, reason: "cannot be read: \(String(cString: strerror(errno)))") }
            defer { close(fd) }
            s.segments += 1
            var st = stat()
            if fstat(fd, &st) == 0 { s.bytes += Int(st.st_size) }
            let valid = LedgerScanner.scan(fd: fd) { kind, payload in
                switch kind {
                case .names:
                    for n in LedgerFormat.parseNames(payload) ?? [] where s.campaigns[n.id] == nil {
                        s.campaigns[n.id] = CampaignStats(name: n.name, scope: n.scope)
                    }
                case .claims:
                    let count = payload.count / LedgerFormat.entryBytes
                    s.claims += count
                    for i in 0..<count {
                        let id = payload.loadUnaligned(fromByteOffset: i * 16 + 8, as: UInt32.self).littleEndian
                        s.campaigns[id, default: CampaignStats(name: "#\(id)", scope: "")].claims += 1
                    }
                case .entries, .proofs:
                    let count = payload.count / LedgerFormat.entryBytes
                    s.entries += count
                    for i in 0..<count {
                        let id = payload.loadUnaligned(fromByteOffset: i * 16 + 8, as: UInt32.self).littleEndian
                        let t = payload.loadUnaligned(fromByteOffset: i * 16 + 12, as: UInt32.self).littleEndian
                        s.campaigns[id, default: CampaignStats(name: "#\(id)", scope: "")].entries += 1
                        s.campaigns[id]!.oldest = min(s.campaigns[id]!.oldest, t)
                        s.campaigns[id]!.newest = max(s.campaigns[id]!.newest, t)
                    }
                }
            } corrupt: { lost in
                s.corruptEntries += lost
                if s.corruptSegments.last != path { s.corruptSegments.append(path) }
            }
            if Int(st.st_size) != valid { s.tornSegments += 1 }
        }
        return s
    }
}

/// Sets a file's access and modification times to `seconds` (UNIX).
public func setModificationTime(_ path: String, seconds: UInt32) {
    var times = [timespec(tv_sec: Int(seconds), tv_nsec: 0), timespec(tv_sec: Int(seconds), tv_nsec: 0)]
    _ = utimensat(AT_FDCWD, path, &times, 0)
}
