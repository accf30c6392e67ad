#if canImport(Glibc)
import Glibc
#endif
import APNSWire
import CampaignIO
import CampaignJSON
import ByteStreams

/// The journal of one send: a directory with an append-only log of records,
/// each line `CRC32 JSON` so a record torn by a crash is detected and ignored;
/// written at every proof of acceptance and fsynced right after (``JournalSyncer``).
/// A lock refuses a second concurrent send.
public final class Journal: @unchecked Sendable {
    public static let logName = "journal.log"
    /// The plan as read from standard input, byte for byte.
    public static let spoolName = "plan.ndjson"
    /// The gzip spool of journals written before the spool was raw; still read.
    public static let legacySpoolName = "plan.ndjson.gz"
    public static let lockName = "lock"

    public let directory: String
    private let file: BufferedFileWriter
    private let lockFD: Int32
    private let lock = Lock()

    public var spoolPath: String { "\(directory)/\(Self.spoolName)" }

    /// The spooled plan, raw or (from an older journal) gzip; either may end
    /// where a kill or power loss cut it.
    public func openSpool() throws -> ByteSource {
        let legacy = "\(directory)/\(Self.legacySpoolName)"
        if access(spoolPath, F_OK) != 0, access(legacy, F_OK) == 0 {
            return try GzipSource(compressed: FileSource(path: legacy), toleratesTruncation: true)
        }
        return try FileSource(path: spoolPath)
    }

    /// Puts `replacement` in the spool's place (and drops an older gzip spool).
    public func replaceSpool(with replacement: String) throws {
        try syscall("rename \(replacement)") { rename(replacement, spoolPath) }
        unlink("\(directory)/\(Self.legacySpoolName)")
    }

    /// Takes the directory's lock, runs `underLock`, then opens the log.
    private init(directory: String, append: Bool, underLock: () throws -> Void = {}) throws {
        self.directory = directory
        let lockPath = "\(directory)/\(Self.lockName)"
        lockFD = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard lockFD >= 0 else { throw JournalError(path: lockPath, reason: .lockUnavailable(String(cString: strerror(errno)))) }
        guard Self.lock(lockFD) else {
            close(lockFD)
            throw JournalError(path: directory, reason: .busy(pid: Self.runningSend(directory: directory)))
        }
        // Who holds it, for `status` and for that message.
        var pid = Array("\(getpid())\n".utf8)
        _ = ftruncate(lockFD, 0)
        _ = pwrite(lockFD, &pid, pid.count, 0)
        do {
            try underLock()
            file = try BufferedFileWriter(path: "\(directory)/\(Self.logName)", append: append, flushThreshold: 1 << 14)
        } catch {
            flock(lockFD, LOCK_UN)
            close(lockFD)
            throw error
        }
    }

    deinit {
        try? file.flush()
        flock(lockFD, LOCK_UN)
        close(lockFD)
    }

    /// Takes the journal's lock for this process. Another look at the lock
    /// (``runningSend(directory:)``: a sibling part's rate, `status`) holds it
    /// shared for an instant, so a refusal is asked again for about half a
    /// second; a running send holds it for good.
    static func lock(_ fd: Int32) -> Bool {
        for attempt in 0..<100 {
            if flock(fd, LOCK_EX | LOCK_NB) == 0 { return true }
            guard errno == EWOULDBLOCK || errno == EINTR, attempt < 99 else { return false }
            usleep(5_000)
        }
        return false
    }

    /// The pid of the send holding the journal in `directory`, or nil when
    /// none does (0 when one does but its pid cannot be read).
    public static func runningSend(directory: String) -> Int32? {
        let fd = open("\(directory)/\(lockName)", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        if flock(fd, LOCK_SH | LOCK_NB) == 0 {
            flock(fd, LOCK_UN)
            return nil
        }
        var bytes = [UInt8](repeating: 0, count: 16)
        let n = pread(fd, &bytes, bytes.count, 0)
        return n > 0 ? Int32(String(decoding: bytes[..<n], as: UTF8.self).trimmingWhitespace()) ?? 0 : 0
    }

    /// Starts a new journal in `directory` (created 0700 when missing; it must not hold one already).
    ///
    /// The log appears whole, with its start record, or not at all (written
    /// aside, fsynced, renamed): a send killed while starting leaves nothing
    /// that `--resume` would find empty and a new send would refuse.
    public static func create(directory: String, settings: SendSettings, planHeader: JSONValue) throws -> Journal {
        try SecureFile.makeDirectory(directory, mode: 0o700)
        let log = "\(directory)/\(logName)"
        return try Journal(directory: directory, append: true) {
            if access(log, F_OK) == 0 {
                throw JournalError(path: directory, reason: .alreadyExists)
            }
            let start = line(JournalRecord.start(settings: settings, planHeader: planHeader).json)
            try SecureFile.write(start, to: log)
            // The rename is durable once the directory is.
            let dir = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            if dir >= 0 {
                fsync(dir)
                close(dir)
            }
        }
    }

    /// A record as a log line: `CRC32 JSON\n`.
    package static func line(_ record: JSONValue) -> [UInt8] {
        var out: [UInt8] = []
        appendLine(body: record.serialized(), to: &out)
        return out
    }

    /// Frames a record's JSON as a log line: 8 hex digits of its CRC-32, a space, the JSON, a newline.
    package static func appendLine(body: [UInt8], to out: inout [UInt8]) {
        var crc = CRC32()
        crc.update(body)
        out.append(contentsOf: crc.hex.utf8)
        out.append(UInt8(ascii: " "))
        out.append(contentsOf: body)
        out.append(0x0A)
    }

    /// Opens an existing journal for appending (a resume) and replays it.
    public static func resume(directory: String) throws -> (Journal, JournalState) {
        let journal = try Journal(directory: directory, append: true)
        var state = try read(directory: directory)
        if let offset = state.tornOffset {
            let path = "\(directory)/\(logName)"
            guard truncate(path, off_t(offset)) == 0 else {
                throw JournalError(path: path, reason: .cannotCutTornRecord(String(cString: strerror(errno))))
            }
            state.tornOffset = nil
        }
        return (journal, state)
    }

    /// Replays a journal without locking it (for `campaign status`).
    public static func read(directory: String) throws -> JournalState {
        let path = "\(directory)/\(logName)"
        let bytes: [UInt8]
        do { bytes = try readWholeFile(path, limit: 1 << 30) } catch {
            throw JournalError(path: directory, reason: .noJournal(error.reason))
        }
        var state: JournalState? = nil
        var offset = 0
        var tornAt: Int? = nil
        while offset < bytes.count {
            guard let lf = bytes[offset...].firstIndex(of: 0x0A) else { tornAt = offset; break }
            let line = bytes[offset..<lf]
            guard let value = Self.verify(line) else {
                // Only the last record may be torn; damage before it is corruption.
                if lf + 1 < bytes.count { throw JournalError(path: path, reason: .damagedRecord(offset: offset)) }
                tornAt = offset
                break
            }
            let record = JournalRecord(json: value)
            if state == nil {
                guard case .start(let settings, let header)? = record else {
                    throw JournalError(path: path, reason: .noStartRecord)
                }
                state = JournalState(settings: settings, planHeader: header)
            }
            if let record { Self.apply(record, to: &state!) }
            offset = lf + 1
        }
        guard var result = state else {
            throw JournalError(path: path, reason: .empty)
        }
        if let tornAt { result.tornTail = true; result.tornOffset = tornAt }
        result.closeUnendedRun()
        result.cancel = JournalCancel.read(directory: directory)
        return result
    }

    /// Calls `body` with each intact record of a journal, in the order
    /// written (a torn last record is left out), without locking it: for
    /// readers that need more than the state, such as when each notification
    /// was proven (`campaign results`).
    public static func forEachRecord(directory: String, _ body: (JournalRecord) throws -> Void) throws {
        let path = "\(directory)/\(logName)"
        let bytes: [UInt8]
        do { bytes = try readWholeFile(path, limit: 1 << 30) } catch {
            throw JournalError(path: directory, reason: .noJournal(error.reason))
        }
        var offset = 0
        while offset < bytes.count {
            guard let lf = bytes[offset...].firstIndex(of: 0x0A) else { break }
            guard let value = Self.verify(bytes[offset..<lf]) else {
                if lf + 1 < bytes.count { throw JournalError(path: path, reason: .damagedRecord(offset: offset)) }
                break
            }
            if let record = JournalRecord(json: value) { try body(record) }
            offset = lf + 1
        }
    }

    package static func verify(_ line: ArraySlice<UInt8>) -> JSONValue? {
        guard line.count > 9, line[line.startIndex + 8] == UInt8(ascii: " ") else { return nil }
        let hex = String(decoding: line.prefix(8), as: UTF8.self)
        let body = line.dropFirst(9)
        var crc = CRC32()
        crc.update(body)
        guard crc.hex == hex else { return nil }
        return try? JSONValue.parse(body)
    }

    package static func apply(_ record: JournalRecord, to s: inout JournalState) {
        switch record {
        case .start(let settings, let header):
            s.closeUnendedRun()
            s.latestRunSettings = settings
            s.runs += 1
            s.timeline.append([])
            s.waves.append([])
            s.runOutcomes.append(nil)
            s.runStartedAt.append(nil)
            s.runSeconds.append(nil)
            s.outcome = nil
            s.waitingUntil = nil
            s.runWoke.append(s.woke)
            s.woke = false
            // A resume with --replan starts with a new plan whose header differs in its times.
            if header != .null { s.planHeader = header }
        case .plan(let records, let crc32, let incomplete):
            s.planChecksum = crc32
            s.planRecords = records
            s.planIncomplete = incomplete
        case .done(let shard, let ranges), .presumed(let shard, let ranges):
            let presumed = if case .presumed = record { true } else { false }
            for r in ranges {
                s.done[shard, default: OrdinalRanges()].insert(r)
                if presumed { s.presumed += r.count } else { s.accepted += r.count }
            }
        case .fail(let f):
            s.failures.append(f)
            s.done[f.shard, default: OrdinalRanges()].insert(f.ordinal..<(f.ordinal + 1))
        case .skip(let k):
            s.skipped.append(k)
            s.done[k.shard, default: OrdinalRanges()].insert(k.ordinal..<(k.ordinal + 1))
        case .wave(let moment, let at):
            s.waitingUntil = nil
            if s.waves.isEmpty { s.waves.append([]) }
            s.waves[s.waves.count - 1].append((moment, at))
        case .sent(let below):
            for (shard, n) in below { s.sentBelow[shard] = max(s.sentBelow[shard] ?? 0, n) }
        case .counters(let resends, let risked, let reconnects, let kinds):
            s.resends += resends
            s.duplicatesRisked += risked
            s.reconnects += reconnects
            s.resentByKind.merge(kinds, uniquingKeysWith: +)
            // A run's own counters, at its end (a resume's first, before its
            // start, counts only possible duplicates): its ticks are counted.
            if resends > 0 || reconnects > 0 {
                // Journals from before kinds were in `counters`: the run's last tick's.
                if kinds.isEmpty { s.resentByKind.merge(s.unclosedTick?.resentByKind ?? [:], uniquingKeysWith: +) }
                s.unclosedTick = nil
            }
        case .clock(let seconds):
            if !s.runStartedAt.isEmpty, s.runStartedAt[s.runStartedAt.count - 1] == nil { s.runStartedAt[s.runStartedAt.count - 1] = seconds }
        case .wait(let until):
            s.waitingUntil = until
        case .woke:
            s.woke = true
        case .variants(let list):
            s.variants = list
        case .ids:
            break   // for the operator and Apple's support; the proof is the done record
        case .end(let outcome, let seconds):
            if let seconds, !s.runSeconds.isEmpty { s.runSeconds[s.runSeconds.count - 1] = seconds }
            // A run's own end wrote its counters first (a tick is left only
            // when they were zeros: it holds zeros too). An end another
            // command wrote for a killed run (`campaign cancel`) did not: its
            // last tick counts it, as a resume's start would.
            s.closeUnendedRun()
            s.outcome = outcome
            if !s.runOutcomes.isEmpty { s.runOutcomes[s.runOutcomes.count - 1] = outcome }
        case .tick(let tick):
            if s.outcome == nil { s.unclosedTick = tick }   // a run that ended counted itself
            if s.timeline.isEmpty { s.timeline.append([]) }
            s.timeline[s.timeline.count - 1].append(tick)
        }
    }

    // MARK: - Writing

    /// The body of the last `sent` record, kept for its memory.
    private var sentBody: [UInt8] = []

    /// Appends one record (buffered until the next checkpoint or 16 KB).
    public func append(_ record: JournalRecord) throws {
        try append(json: record.json)
    }

    private func append(json record: JSONValue) throws {
        lock.lock()
        defer { lock.unlock() }
        Self.appendLine(body: record.serialized(), to: &file.buffer)
        try file.flushIfFull()
    }

    /// Appends a ``JournalRecord/sent(below:)`` record,
    /// `{"t":"sent","below":{"SHARD":N,…}}`, for the given shards (those
    /// with N > 0), built as bytes: through JSONValue,
    /// with a dictionary and Strings, this record (written before every
    /// batch) was a twentieth of send's busiest thread.
    public func appendSent(shards: [Int32], below: [Int32]) throws {
        lock.lock()
        defer { lock.unlock() }
        sentBody.removeAll(keepingCapacity: true)
        sentBody.append(contentsOf: #"{"t":"sent","below":{"#.utf8)
        var first = true
        for shard in shards where below[Int(shard)] > 0 {
            if !first { sentBody.append(UInt8(ascii: ",")) }
            first = false
            sentBody.append(UInt8(ascii: "\""))
            JSONText.appendDecimal(shard, to: &sentBody)
            sentBody.append(contentsOf: #"":"#.utf8)
            JSONText.appendDecimal(below[Int(shard)], to: &sentBody)
        }
        sentBody.append(contentsOf: "}}".utf8)
        Self.appendLine(body: sentBody, to: &file.buffer)
        try file.flush()
    }

    /// Hands what is buffered to the kernel: it survives the process being killed.
    public func flush() throws {
        lock.lock()
        defer { lock.unlock() }
        try file.flush()
    }

    /// Writes out what is buffered and fsyncs: after this, the records survive a power loss.
    public func checkpoint() throws {
        lock.lock()
        defer { lock.unlock() }
        try file.sync()
    }

    /// fsyncs what has been handed to the kernel (``flush()``), leaving what
    /// is buffered alone: for a thread other than the one appending.
    public func syncWritten() throws {
        try file.syncWritten()
    }

    /// Ordinals of one shard now final: proven accepted, or (simple format) presumed delivered.
    package func recordDone(shard: Int, ordinals: [Int], presumed: Bool) throws {
        guard !ordinals.isEmpty else { return }
        let ranges = OrdinalRanges.ranges(of: ordinals)
        try append(presumed ? .presumed(shard: shard, ranges: ranges) : .done(shard: shard, ranges: ranges))
    }
}
