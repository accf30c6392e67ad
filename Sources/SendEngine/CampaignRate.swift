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
/// put the campaign 10 % over its rate in a 10-second window). A part that
/// sees no other part's journal beside its own takes rate / parts, from the
/// plan's header: parts sent from journals kept apart keep to the campaign's
/// rate only when all of them run at once.
public final class CampaignRate: @unchecked Sendable {
    public let totalPerSecond: Double
    private let directory: String
    private let parent: String
    private let campaignHash: String?
    private let parts: Int
    /// Journal directory → whether its send is a part of this planning run,
    /// once its start record said (a directory whose send has not written one
    /// yet is looked at again: counted as not of this run, a part that started
    /// beside this one never took its share, and three parts sent at 1,339 a
    /// second where the campaign's rate was 1,000).
    private var siblings: [String: Bool] = [:]
    private var lastLook: Double = -.infinity
    private var share: Double
    private let lock = Lock()

    public init(totalPerSecond: Double, journal directory: String, part: PlanPart?) {
        self.totalPerSecond = totalPerSecond
        self.directory = URL(fileURLWithPath: directory).standardizedFileURL.path
        parent = (self.directory as NSString).deletingLastPathComponent
        campaignHash = part?.campaignHash
        parts = part?.count ?? 1
        share = totalPerSecond / Double(parts)
    }

    /// How often the journals beside this one are looked at, in seconds.
    package static let lookSeconds = 0.25

    /// This part's rate now (per second), looked at again after ``lookSeconds`` (`now`: monotonic seconds).
    package func perSecond(now: Double) -> Double {
        lock.withLock {
            if now - lastLook >= Self.lookSeconds {
                lastLook = now
                share = look()
            }
            return share
        }
    }

    /// The share from the journals beside this one.
    private func look() -> Double {
        guard let campaignHash, parts > 1 else { return totalPerSecond }
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: parent)) ?? []
        var seen = 0, running = 0
        for name in entries {
            let path = "\(parent)/\(name)"
            if siblings[path] == nil {
                switch Self.origin(ofJournal: path) {
                case .part(let hash): siblings[path] = hash == campaignHash
                case .notPart: siblings[path] = false
                case .unknown: continue
                }
            }
            guard siblings[path] == true else { continue }
            seen += 1
            if path == directory || Journal.runningSend(directory: path) != nil { running += 1 }
        }
        // Only its own journal in sight: the others are elsewhere, or not started.
        guard seen > 1 else { return totalPerSecond / Double(parts) }
        return totalPerSecond / Double(max(1, running))
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

    /// The origin of the journal in `path`, from its first record alone
    /// (read up to its newline, however long the plan's header makes it).
    package static func origin(ofJournal path: String) -> JournalOrigin {
        let fd = open("\(path)/\(Journal.logName)", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return .unknown }
        defer { close(fd) }
        var line: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while line.count < 1 << 26 {
            let n = read(fd, &chunk, chunk.count)
            guard n > 0 else { return .unknown }
            if let lf = chunk[0..<n].firstIndex(of: 0x0A) {
                line += chunk[0..<lf]
                guard let value = Journal.verify(line[...]), case .start(_, let header)? = JournalRecord(json: value),
                      let h = try? PlanHeader(json: header) else { return .unknown }
                return h.part.map { .part(campaignHash: $0.campaignHash) } ?? .notPart
            }
            line += chunk[0..<n]
        }
        return .unknown
    }
}
