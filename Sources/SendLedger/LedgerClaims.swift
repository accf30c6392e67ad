#if canImport(Glibc)
import Glibc
#endif
import CampaignIO

/// A send's frequencyCap, held across processes: before a connection writes
/// a batch of notifications, it takes the scope's claim lock in the ledger
/// directory, reads what the other sends of the scope have appended since it
/// last looked, keeps back each device already at the cap, appends a claim
/// for each of the others to its own segment, and lets the lock go. Two
/// sends of one scope releasing at the same moment are thus ordered: the
/// second sees the first's claims. A claim counts whether or not the
/// notification was then proven (a connection lost, a process killed): the
/// cap counts what may have reached the device.
///
/// The campaign's own entries never count against it: a resume sends again
/// what its earlier run could not prove (its possible duplicates), and the
/// parts of one campaign hold different devices.
public final class LedgerClaims: @unchecked Sendable {
    public let directory: String
    public let cap: FrequencyCap
    private let me: UInt32
    private let writer: LedgerSegmentWriter
    private let lockFD: Int32
    private let mutex = Lock()

    /// Per device, the other campaigns' notifications of the scope inside the window.
    private var view = LedgerView()
    private struct Tail {
        var offset: Int
        var inode: UInt64
        /// The segment's campaign ids of the cap's scope (nil: not read yet).
        var inScope: Set<UInt32>?
    }
    private var tails: [String: Tail] = [:]
    private var listedAt = timespec(tv_sec: -1, tv_nsec: 0)
    /// When the view was last built from the start: entries leave the window as time passes.
    private var builtAt: Int64?
    /// How long a view counts entries that have since left the window before it is built again.
    public static let rebuildSeconds: Int64 = 600

    /// Devices claimed: by this run, per shard and ordinal; by the campaign's
    /// earlier runs (a resume's), by token hash.
    private var claimedNow: [[UInt64]]
    private let claimedBefore: LedgerView?
    private var pending: [UInt64] = []
    private var locked = false
    public private(set) var claimsWritten = 0
    /// Devices kept back at the cap.
    public private(set) var refused = 0

    /// How long a send waits for another to let the claim lock go (it holds
    /// it for one batch) before it stops: a stopped or hung holder must not
    /// make it send unclaimed, nor crawl.
    public static let lockWaitSeconds = 30.0
    /// This claimer's wait (tests shorten it).
    public var lockWaitSeconds = LedgerClaims.lockWaitSeconds

    /// The claim lock's path.
    public var lockPath: String { "\(directory)/\(LedgerFormat.claimLockName(scope: cap.scope))" }

    public init(directory: String, cap: FrequencyCap, campaign: String, writer: LedgerSegmentWriter, shards: Int,
                resumed: Bool) throws {
        self.directory = directory
        self.cap = cap
        me = LedgerFormat.nameID(campaign)
        self.writer = writer
        let path = "\(directory)/\(LedgerFormat.claimLockName(scope: cap.scope))"   // lockPath, before self is whole
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw LedgerError(path: path, reason: "cannot be opened: \(String(cString: strerror(errno)))", writing: true, errno: errno) }
        lockFD = fd
        claimedNow = Array(repeating: [], count: max(1, shards))
        claimedBefore = resumed
            ? try LedgerReader.load(directory: directory, filter: .init(campaign: campaign, cap: nil, now: 0, ownClaims: true))
            : nil
    }

    deinit { close(lockFD) }

    /// How ``begin(now:stopped:)`` ended.
    public enum Begun: Equatable, Sendable {
        /// The lock is held and the view is up to date: admit, then ``end(now:)``.
        case locked
        /// Stopping, or the lock was held elsewhere for ``lockWaitSeconds``:
        /// nothing may be admitted (``admit(hash:shard:ordinal:)`` says no to all); ``end(now:)`` still follows.
        case notLocked(waitedSeconds: Int)
    }

    /// Takes the scope's claim lock (waiting at most ``lockWaitSeconds``,
    /// and no longer once `stopped` says so) and brings the view up to `now`.
    public func begin(now: Int64, stopped: () -> Bool) -> Begun {
        mutex.lock()
        let started = Deadline.now()
        let giveUp = Deadline.after(seconds: lockWaitSeconds)
        locked = false
        while !stopped() {
            if flock(lockFD, LOCK_EX | LOCK_NB) == 0 {
                locked = true
                break
            }
            guard errno == EWOULDBLOCK || errno == EINTR, Deadline.now() < giveUp else { break }
            usleep(1000)
        }
        guard locked else { return .notLocked(waitedSeconds: Int((Deadline.now().nanoseconds - started.nanoseconds) / 1_000_000_000)) }
        refresh(now: now)
        return .locked
    }

    /// Whether the device of record (`shard`, `ordinal`), token hash `hash`,
    /// may be written: below the cap. If so, it is claimed (written at ``end(now:)``).
    public func admit(hash: UInt64, shard: Int32, ordinal: Int32) -> Bool {
        guard locked else { return false }
        guard Int(view.flags(hash) & 0x7F) < cap.max else {
            refused += 1
            return false
        }
        let (word, bit) = (Int(ordinal) >> 6, UInt64(1) << UInt64(ordinal & 63))
        let s = Int(shard)
        if s >= claimedNow.count { claimedNow += Array(repeating: [], count: s + 1 - claimedNow.count) }
        if claimedNow[s].count <= word { claimedNow[s] += Array(repeating: 0, count: word + 1 - claimedNow[s].count) }
        guard claimedNow[s][word] & bit == 0 else { return true }
        claimedNow[s][word] |= bit
        if let before = claimedBefore, before.flags(hash) & 0x7F != 0 { return true }
        pending.append(hash)
        return true
    }

    /// Appends the claims admitted since ``begin(now:stopped:)`` (one block,
    /// one write, before any of their bytes leave) and lets the lock go.
    public func end(now: Int64) throws(LedgerError) {
        defer {
            if locked { _ = flock(lockFD, LOCK_UN) }
            locked = false
            mutex.unlock()
        }
        guard !pending.isEmpty else { return }
        let batch = pending
        pending.removeAll(keepingCapacity: true)
        try writer.append(hashes: batch, seconds: UInt32(clamping: now), kind: .claims)
        claimsWritten += batch.count
    }

    /// Reads what other sends appended since the last look; builds the view
    /// again from the start when a segment was replaced (a prune) or the
    /// window has moved on by ``rebuildSeconds``.
    private func refresh(now: Int64) {
        var st = stat()
        var replaced = builtAt.map { now - $0 >= Self.rebuildSeconds } ?? true
        if stat(directory, &st) == 0, st.st_mtim.tv_sec != listedAt.tv_sec || st.st_mtim.tv_nsec != listedAt.tv_nsec {
            listedAt = st.st_mtim
            let present = Set((try? LedgerReader.segments(of: directory)) ?? [])
            if tails.keys.contains(where: { !present.contains($0) }) { replaced = true }
            for path in present where tails[path] == nil { tails[path] = Tail(offset: 0, inode: 0, inScope: nil) }
        }
        if replaced {
            view = LedgerView()
            for path in tails.keys { tails[path] = Tail(offset: 0, inode: 0, inScope: nil) }
            builtAt = now
        }
        let cutoff = UInt32(clamping: now - Int64(cap.perSeconds))
        let mine = writer.path
        for (path, tail) in tails where path != mine {
            if let scope = tail.inScope, scope.isEmpty { continue }
            guard stat(path, &st) == 0 else { continue }
            if tail.inode != 0, tail.inode != UInt64(st.st_ino) {
                // Replaced under this view (pruned): its entries are counted already; read it all at the next rebuild.
                builtAt = nil
                continue
            }
            guard Int(st.st_size) > tail.offset else { continue }
            tails[path] = read(path, tail: tail, cutoff: cutoff, inode: UInt64(st.st_ino))
        }
    }

    private func read(_ path: String, tail: Tail, cutoff: UInt32, inode: UInt64) -> Tail {
        var tail = tail
        tail.inode = inode
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return tail }
        defer { close(fd) }
        var inScope = tail.inScope ?? []
        var sawNames = tail.inScope != nil
        let me = self.me, scope = cap.scope
        tail.offset = LedgerScanner.scan(fd: fd, from: tail.offset, tailMayBeGrowing: true) { kind, payload in
            switch kind {
            case .names:
                sawNames = true
                for name in LedgerFormat.parseNames(payload) ?? [] where name.scope == scope && name.id != me { inScope.insert(name.id) }
            case .entries, .claims, .proofs:
                guard kind.counts, !inScope.isEmpty else { return }
                let base = payload.baseAddress!
                for i in 0..<(payload.count / LedgerFormat.entryBytes) {
                    let e = base + i * LedgerFormat.entryBytes
                    guard inScope.contains(e.loadUnaligned(fromByteOffset: 8, as: UInt32.self).littleEndian),
                          e.loadUnaligned(fromByteOffset: 12, as: UInt32.self).littleEndian >= cutoff else { continue }
                    view.add(e.loadUnaligned(as: UInt64.self).littleEndian, reached: false, counted: true)
                }
            }
        }
        // A segment is one campaign: once its names are read, one of another scope is never read again.
        tail.inScope = sawNames ? inScope : nil
        return tail
    }
}
