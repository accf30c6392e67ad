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
    private var siblings: [String: Bool] = [:]   // journal directory → of this planning run
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
            if siblings[path] == nil { siblings[path] = Self.part(of: path) == campaignHash }
            guard siblings[path] == true else { continue }
            seen += 1
            if path == directory || Journal.runningSend(directory: path) != nil { running += 1 }
        }
        // Only its own journal in sight: the others are elsewhere, or not started.
        guard seen > 1 else { return totalPerSecond / Double(parts) }
        return totalPerSecond / Double(max(1, running))
    }

    /// The planning run of the journal in `path`, from its first record alone.
    package static func part(of path: String) -> String? {
        guard let fd = Optional(open("\(path)/\(Journal.logName)", O_RDONLY | O_CLOEXEC)), fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: 1 << 16)
        let n = read(fd, &bytes, bytes.count)
        guard n > 9, let lf = bytes[0..<n].firstIndex(of: 0x0A), let value = Journal.verify(bytes[0..<lf]),
              case .start(_, let header)? = JournalRecord(json: value), let h = try? PlanHeader(json: header) else { return nil }
        return h.part?.campaignHash
    }
}
