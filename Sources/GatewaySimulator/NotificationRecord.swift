import CampaignIO
import Foundation
import APNSWire
import CampaignJSON

/// Appends accepted notifications to the `--record` file as NDJSON:
/// `{"conn":N,"cmd":C,"id":I|null,"expiry":E|null,"priority":P|null,"token":"hex","payload":"…"}`.
///
/// Each connection formats lines into its own buffer; ``write(_:)`` takes the
/// lock once per batch, so connections never contend per notification.
final class NotificationRecordFile: @unchecked Sendable {
    private let handle: FileHandle
    private let lock = Lock()

    /// `path` may be `-` for standard output.
    init(path: String) throws {
        guard path != "-" else {
            handle = FileHandle(fileDescriptor: 1, closeOnDealloc: false)
            return
        }
        // The record holds device tokens: owner-only.
        let fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw SimulatorInputError(path: path, line: nil, reason: "cannot be created: \(String(cString: strerror(errno)))")
        }
        handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
    }

    func write(_ bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        lock.lock()
        defer { lock.unlock() }
        handle.write(Data(bytes))
    }

    /// The wall clock in UNIX milliseconds: when a notification arrived.
    static func nowMilliseconds() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }

    /// Formats one line into `out` (`received_ms`: when it arrived, UNIX milliseconds).
    static func appendLine(connection: Int, notification n: DecodedNotification, receivedMilliseconds: Int64, to out: inout [UInt8]) {
        out.append(contentsOf: #"{"conn":"#.utf8)
        JSONText.appendDecimal(connection, to: &out)
        out.append(contentsOf: #","received_ms":"#.utf8)
        JSONText.appendDecimal(receivedMilliseconds, to: &out)
        out.append(contentsOf: #","cmd":"#.utf8)
        JSONText.appendDecimal(n.format.command, to: &out)
        out.append(contentsOf: #","id":"#.utf8)
        appendOptional(n.identifier, to: &out)
        out.append(contentsOf: #","expiry":"#.utf8)
        appendOptional(n.expiry, to: &out)
        out.append(contentsOf: #","priority":"#.utf8)
        appendOptional(n.priority?.rawValue, to: &out)
        out.append(contentsOf: #","token":""#.utf8)
        HexEncoding.append(n.token, to: &out)
        out.append(contentsOf: #"","payload":"#.utf8)
        JSONText.appendString(n.payload, to: &out)
        out.append(contentsOf: "}\n".utf8)
    }

    private static func appendOptional(_ value: (some BinaryInteger)?, to out: inout [UInt8]) {
        if let value { JSONText.appendDecimal(value, to: &out) } else { out.append(contentsOf: "null".utf8) }
    }
}
