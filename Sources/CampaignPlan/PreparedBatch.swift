import AudienceIngest
import CampaignIO
import ByteStreams

/// What the preparing stage made of one row: everything that does not depend
/// on the rows before it. De-duplication, feedback suppression and numbering
/// come after, in order, in ``Planner``.
struct PreparedRow {
    enum Kind: UInt8 {
        /// The record line is ready (`truncated`: its text was shortened).
        case ready, truncated
        /// Rejected whatever came before it (malformed, no token, bad token).
        case rejectedOutright
        /// Rejected unless an earlier row or the feedback store rejects it first.
        case rejectedUnlessDuplicate
        /// A holdout variant's device, unless an earlier row or the feedback
        /// store rejects it first: the arena's line holds its row as a JSON object.
        case heldOut
    }

    var kind = Kind.rejectedOutright
    /// The audience line the row starts on.
    var line = 0
    var message: Int32 = 0
    /// The token's bytes in the batch's arena; count 0 when the row has none.
    var tokenStart: Int32 = 0
    var tokenCount: Int32 = 0
    /// The record line after `{"seq":N`, in the arena.
    var lineStart: Int32 = 0
    var lineEnd: Int32 = 0
    /// Into the batch's rejections, for the rejected kinds.
    var rejection: Int32 = -1
    var registeredColumn: Int32 = -1
    var tokenHash: UInt64 = 0
    /// Which plan part the record goes to (`plan --parts`): its shard mod the part count.
    var part: Int32 = 0
    /// Bit `v`: variable `v` of the renderer had no value and its default was written.
    var defaulted: UInt64 = 0
    /// A scheduled job: the row's zone in the planner's ``ZoneTable`` (0: the job's default).
    var zone: Int32 = 0
    /// The row's zone was empty or unknown, so the default was used.
    var zoneDefaulted = false
    /// A job with variants: the row's (an index into the job's variants); -1 without.
    var variant: Int32 = -1
}

/// A reject code and its sentence.
struct Rejection {
    var code: RejectCode
    var reason: String
    /// The row's token field as it was, when it could not be read as one (a broadcast's rejects name it).
    var given: String? = nil
}

/// Rows read and prepared together, handed from the preparing thread to the
/// planning one. The rows stay (swapped in, not copied) for the few rejects
/// that need a value from them.
final class PreparedBatch: @unchecked Sendable {
    var rows: [AudienceRow]
    /// What the reader said of each row (filled by the reading stage).
    var records: [AudienceRecord?]
    /// The reader's column names when they changed during this batch, else empty.
    var schemaNames: [String] = []
    var prepared: [PreparedRow]
    var rejections: [Rejection] = []
    let arena = ByteArena(capacity: 1 << 18)
    var count = 0
    var failure: Error?
    var ended = false

    init(size: Int) {
        rows = Array(repeating: AudienceRow(), count: size)
        records = Array(repeating: nil, count: size)
        prepared = Array(repeating: PreparedRow(), count: size)
    }

    /// The token of prepared row `i`, nil when it has none.
    func withToken<R>(of i: Int, _ body: (UnsafeBufferPointer<UInt8>?) throws -> R) rethrows -> R {
        let p = prepared[i]
        guard p.tokenCount > 0 else { return try body(nil) }
        return try body(arena.bytes(Int(p.tokenStart)..<Int(p.tokenStart + p.tokenCount)))
    }
}
