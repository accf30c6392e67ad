import APNSWire
import CampaignIO
import CampaignTLS

/// The gateway's side of one connection: reads, decodes, validates, records,
/// and decides how the connection ends. Holds no locks; reports progress to
/// its owner once per read.
struct GatewaySession {
    enum Ending: Equatable {
        /// The client closed the connection.
        case peerClosed
        /// The simulator is stopping.
        case cancelled
        /// A hard drop: closed without an error response.
        case dropped
        /// An error response was written (or, for command 0, none could be).
        case refused
        /// HTTP/2: a GOAWAY was sent and every stream it covers answered. The
        /// client may still be sending requests it began before the GOAWAY
        /// reached it: closing with them unread would reset the connection and
        /// destroy, at the client, the last answers still on their way.
        case wentAway
    }

    /// What changed since the last report.
    struct Progress {
        var accepted = 0
        var discarded = 0
        var rejected: ErrorResponse.Status? = nil
        var ending: String? = nil
        var recordLines: [UInt8] = []
    }

    let index: Int
    let faults: FaultPlan
    let limits: NotificationDecoder.Limits
    let recording: Bool
    private var rng: SplitMix64
    private var acceptedTotal = 0
    /// When the bytes being decoded arrived (UNIX milliseconds), for the record.
    private var receivedMilliseconds: Int64 = 0
    private var lastAccepted: UInt32? = nil

    init(index: Int, faults: FaultPlan, limits: NotificationDecoder.Limits, recording: Bool) {
        self.index = index
        self.faults = faults
        self.limits = limits
        self.recording = recording
        rng = SplitMix64(seed: faults.seed &+ UInt64(index))
    }

    mutating func run(
        connection: TLSConnection, cancellation: CancellationPipe, report: (Progress) -> Void
    ) -> Ending {
        var decoder = NotificationDecoder(limits: limits)
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var progress = Progress()
        progress.recordLines.reserveCapacity(recording ? 1 << 18 : 0)
        while true {
            if faults.readDelayMilliseconds > 0,
               !sleep(until: .after(milliseconds: faults.readDelayMilliseconds), cancellation: cancellation) {
                progress.ending = "simulator stopped"
                report(progress)
                return .cancelled
            }
            let n: Int
            do throws(TLSError) {
                n = try connection.read(into: &buffer, cancellation: cancellation)
            } catch {
                progress.ending = error.kind == .cancelled ? "simulator stopped" : "read failed: \(error)"
                report(progress)
                return .cancelled
            }
            if n == 0 {
                progress.ending = "client closed"
                report(progress)
                return .peerClosed
            }
            buffer.withUnsafeBytes { decoder.append(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            // When these bytes arrived, for the record (once per read, not per notification).
            if recording { receivedMilliseconds = NotificationRecordFile.nowMilliseconds() }
            if let ending = decodeAvailable(&decoder, &progress, connection: connection, cancellation: cancellation) {
                report(progress)
                return ending
            }
            report(progress)
            progress.accepted = 0
            progress.recordLines.removeAll(keepingCapacity: true)
        }
    }

    /// Handles every complete packet in the decoder; returns how the connection
    /// ends, or nil to keep reading.
    private mutating func decodeAvailable(
        _ decoder: inout NotificationDecoder, _ progress: inout Progress,
        connection: TLSConnection, cancellation: CancellationPipe
    ) -> Ending? {
        while true {
            let notification: DecodedNotification
            do {
                guard let next = try decoder.next() else { return nil }
                notification = next
            } catch {
                // A packet that cannot be framed: nothing after it can be counted.
                progress.rejected = error.status
                progress.ending = "refused: \(error)"
                respond(error.errorResponse, connection: connection, cancellation: cancellation)
                return .refused
            }
            if !faults.poisonTokens.isEmpty, faults.poisonTokens.contains(Array(notification.token)) {
                progress.discarded = Self.countComplete(&decoder)
                progress.ending = "dropped on a poison token"
                return .dropped
            }
            if let status = refusal(of: notification) {
                progress.rejected = status
                progress.discarded = Self.countComplete(&decoder)
                if notification.format == .simple {
                    progress.ending = "refused a command-0 notification with status \(status) (closed without a response)"
                } else {
                    let response = ErrorResponse(status: status, identifier: notification.identifier ?? 0)
                    progress.ending = "refused with \(response)"
                    respond(response, connection: connection, cancellation: cancellation)
                }
                return .refused
            }
            acceptedTotal += 1
            progress.accepted += 1
            lastAccepted = notification.identifier
            if recording {
                NotificationRecordFile.appendLine(connection: index, notification: notification, receivedMilliseconds: receivedMilliseconds,
                                                  to: &progress.recordLines)
            }
            if let limit = faults.dropEvery, acceptedTotal % limit == 0 {
                progress.discarded = Self.countComplete(&decoder)
                progress.ending = "dropped after \(acceptedTotal) accepted"
                return .dropped
            }
            if let limit = faults.shutdownAfter, acceptedTotal == limit {
                progress.discarded = Self.countComplete(&decoder)
                let response = ErrorResponse(status: .shutdown, identifier: lastAccepted ?? 0)
                progress.ending = "shut down after \(acceptedTotal) accepted"
                respond(response, connection: connection, cancellation: cancellation)
                return .refused
            }
        }
    }

    /// The status the gateway refuses a well-framed notification with, if any.
    private mutating func refusal(of n: DecodedNotification) -> ErrorResponse.Status? {
        if !faults.badTokens.isEmpty, faults.badTokens.contains(Array(n.token)) { return .invalidToken }
        // Status 7 is the nearest the guides come to "invalid payload": the
        // gateway documents no code for malformed JSON.
        if PayloadInspector.problem(in: n.payload) != nil { return .invalidPayloadSize }
        if faults.errorRate > 0, Double(rng.next() >> 11) * 0x1p-53 < faults.errorRate { return .processingError }
        return nil
    }

    private func respond(_ response: ErrorResponse, connection: TLSConnection, cancellation: CancellationPipe) {
        try? connection.write(response.encoded(), cancellation: cancellation, deadline: .after(seconds: 5))
    }

    /// Counts the complete packets left in the decoder: received, but discarded.
    private static func countComplete(_ decoder: inout NotificationDecoder) -> Int {
        var count = 0
        while let next = try? decoder.next(), next.encodedCount > 0 { count += 1 }
        return count
    }
}

