#if canImport(Glibc)
import Glibc
#endif
import Foundation
import CampaignIO
import CampaignJSON
import PlanStream
import SendJournal

/// A campaign's rate over all its parts (a job's `throttle.perMinute`, or
/// `send --rate-total`): this part's share of it. Parts whose journals share
/// a directory (`JOURNALS/k`, as parallel.sh and the Kubernetes job lay them
/// out) see who is sending: the share is the rate over the parts of the same
/// planning run whose send is running now, looked at four times a second, so
/// a part that finishes, or is killed, leaves its share to the others, and
/// one that starts or resumes beside them is over the campaign's rate for a
/// quarter of a second at most (at once a second, a resumed part of three
/// put the campaign 10 % over its rate in a 10-second window). Parts given
/// different rates (one part's `--rate-total`, a resume's) keep to the lowest
/// any running part was given: each taking its own share of its own rate put
/// the campaign 17 % over the job's. A part that sees no other part's journal
/// beside its own takes rate / parts, from the plan's header: parts sent from
/// journals kept apart keep to the campaign's rate only when all of them run at once.
public final class CampaignRate: @unchecked Sendable {
    public let totalPerSecond: Double
    private let directory: String
    private let parent: String
    private let campaignHash: String?
    private let parts: Int
    /// Journal directory → what its journal has told so far (read on as it grows).
    private var siblings: [String: SiblingJournal] = [:]
    /// Journal directories of other planning runs (not read again).
    private var strangers: Set<String> = []
    private var lastLook: Double = -.infinity
    private var share: Double
    /// The rate the parts running now keep to: the lowest they were given.
    private var agreed: Double
    private let lock = Lock()

    public init(totalPerSecond: Double, journal directory: String, part: PlanPart?) {
        self.totalPerSecond = totalPerSecond
        self.directory = URL(fileURLWithPath: directory).standardizedFileURL.path
        parent = (self.directory as NSString).deletingLastPathComponent
        campaignHash = part?.campaignHash
        parts = part?.count ?? 1
        share = totalPerSecond / Double(parts)
        agreed = totalPerSecond
    }

    /// How often the journals beside this one are looked at, in seconds.
    package static let lookSeconds = 0.25

    /// This part's rate now (per second), looked at again after ``lookSeconds`` (`now`: monotonic seconds).
    package func perSecond(now: Double) -> Double {
        lock.withLock {
            if now - lastLook >= Self.lookSeconds {
                lastLook = now
                (share, agreed) = look()
            }
            return share
        }
    }

    /// The campaign's rate the running parts keep to (per second), as last looked at.
    package var agreedPerSecond: Double { lock.withLock { agreed } }

    /// The share, and the rate it is a share of, from the journals beside this one.
    private func look() -> (share: Double, of: Double) {
        guard let campaignHash, parts > 1 else { return (totalPerSecond, totalPerSecond) }
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: parent)) ?? []
        var seen = 0, running = 0
        var lowest = totalPerSecond
        for name in entries {
            let path = "\(parent)/\(name)"
            guard path != directory else { seen += 1; running += 1; continue }
            guard !strangers.contains(path) else { continue }
            var sibling = siblings[path] ?? SiblingJournal()
            sibling.readOn(path: path)
            siblings[path] = sibling
            switch sibling.origin {
            case .part(let hash) where hash == campaignHash: seen += 1
            // Not started yet (a send takes its directory's lock, then writes its journal): looked at again.
            case .unknown: continue
            case .part, .notPart:
                strangers.insert(path)
                siblings[path] = nil
                continue
            }
            if Journal.runningSend(directory: path) != nil {
                running += 1
                if let given = sibling.perSecond { lowest = min(lowest, given) }
            }
        }
        // Only its own journal in sight: the others are elsewhere, or not started.
        guard seen > 1 else { return (totalPerSecond / Double(parts), totalPerSecond) }
        return (lowest / Double(max(1, running)), lowest)
    }

    /// Where a journal directory's send came from, by its journal's first record.
    package enum JournalOrigin: Equatable {
        /// A part of the planning run named by this hash.
        case part(campaignHash: String)
        /// A plan not cut into parts.
        case notPart
        /// No start record to read (yet): a send takes its directory's lock,
        /// then writes its journal whole (aside, then renamed).
        case unknown
    }

    /// The origin of the journal in `path`, from its first record alone.
    package static func origin(ofJournal path: String) -> JournalOrigin {
        var sibling = SiblingJournal()
        sibling.readOn(path: path)
        return sibling.origin
    }

    /// What a journal beside this one has told: where its send came from (its
    /// first record) and the rate its latest run was given (its latest start
    /// record), read forward from where the last look ended, whole lines only.
    package struct SiblingJournal {
        package var origin: JournalOrigin = .unknown
        /// The campaign's rate (per second) its latest run was given; nil: none.
        package private(set) var perSecond: Double?
        /// Where the next look reads from: the end of the last whole, sound line.
        private var offset = 0

        package init() {}

        package mutating func readOn(path: String) {
            let fd = open("\(path)/\(Journal.logName)", O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { return }
            defer { close(fd) }
            var info = stat()
            guard fstat(fd, &info) == 0 else { return }
            let size = Int(info.st_size)
            // Shorter than what was read: its torn tail was cut by a resume; read it again from the start.
            if size < offset { self = SiblingJournal() }
            guard size > offset else { return }
            guard lseek(fd, off_t(offset), SEEK_SET) == off_t(offset) else { return }
            var bytes: [UInt8] = []
            bytes.reserveCapacity(size - offset)
            var chunk = [UInt8](repeating: 0, count: 1 << 16)
            while bytes.count < size - offset {
                let n = read(fd, &chunk, min(chunk.count, size - offset - bytes.count))
                guard n > 0 else { break }
                bytes += chunk[0..<n]
            }
            let got = bytes.count
            var start = 0
            while let lf = bytes[start..<got].firstIndex(of: 0x0A) {
                let line = bytes[start..<lf]
                guard let value = Journal.verify(line) else {
                    // The last line unsound is torn, and may be cut and written over: read it again next time.
                    if bytes[(lf + 1)..<got].firstIndex(of: 0x0A) == nil { break }
                    start = lf + 1
                    continue
                }
                if Self.isStart(line), case .start(let settings, let header)? = JournalRecord(json: value) {
                    let h = try? PlanHeader(json: header)
                    if origin == .unknown { origin = h.map { $0.part.map { .part(campaignHash: $0.campaignHash) } ?? .notPart } ?? .notPart }
                    perSecond = settings.rateTotal.map(Double.init) ?? h?.throttlePerMinute.map { Double($0) / 60 }
                }
                start = lf + 1
            }
            offset += start
        }

        /// Whether a journal line (`CRC32 JSON`) is a start record, without parsing it.
        private static func isStart(_ line: ArraySlice<UInt8>) -> Bool {
            let prefix = Array(#"{"t":"start""#.utf8)
            return line.count > 9 + prefix.count && line.dropFirst(9).prefix(prefix.count).elementsEqual(prefix)
        }
    }
}
