/// The gateway's error-response packet: `|8|status (1)|identifier (4)|`.
///
/// The gateway sends it for the enhanced and frame formats when it refuses a
/// notification, then closes the connection and discards everything sent after
/// the named notification. With ``Status/shutdown`` the identifier names the
/// last notification it accepted instead.
public struct ErrorResponse: Hashable, Sendable, CustomStringConvertible {
    /// The command byte of an error-response packet.
    public static let command: UInt8 = 8
    /// The packet's fixed size in bytes.
    public static let encodedCount = 6

    public var status: Status
    public var identifier: UInt32

    public init(status: Status, identifier: UInt32) {
        self.status = status
        self.identifier = identifier
    }

    /// Decodes exactly one packet; nil when `bytes` is not 6 bytes starting with command 8.
    public init?(bytes: some Collection<UInt8>) {
        let b = Array(bytes)
        guard b.count == Self.encodedCount, b[0] == Self.command else { return nil }
        self.status = Status(rawValue: b[1])
        self.identifier = b.readBigEndianUInt32(at: 2)
    }

    public func encode(into buffer: inout [UInt8]) {
        buffer.append(Self.command)
        buffer.append(status.rawValue)
        buffer.appendBigEndian(identifier)
    }

    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(Self.encodedCount)
        encode(into: &out)
        return out
    }

    public var description: String {
        "error response: status \(status.rawValue) (\(status.meaning)) for identifier \(identifier)"
    }

    /// A status code of the error-response packet. Codes the guides do not
    /// define are kept as they came, never refused.
    public struct Status: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public var rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }

        public static let noErrors = Status(rawValue: 0)
        public static let processingError = Status(rawValue: 1)
        public static let missingDeviceToken = Status(rawValue: 2)
        public static let missingTopic = Status(rawValue: 3)
        public static let missingPayload = Status(rawValue: 4)
        public static let invalidTokenSize = Status(rawValue: 5)
        public static let invalidTopicSize = Status(rawValue: 6)
        public static let invalidPayloadSize = Status(rawValue: 7)
        public static let invalidToken = Status(rawValue: 8)
        /// The gateway is closing the connection, e.g. for maintenance. The
        /// identifier names the last notification it accepted.
        public static let shutdown = Status(rawValue: 10)
        /// APNs could not parse the notification.
        public static let protocolError = Status(rawValue: 128)
        public static let unknown = Status(rawValue: 255)

        /// Every status code the guides define.
        public static let allDefined: [Status] = [
            .noErrors, .processingError, .missingDeviceToken, .missingTopic, .missingPayload,
            .invalidTokenSize, .invalidTopicSize, .invalidPayloadSize, .invalidToken,
            .shutdown, .protocolError, .unknown,
        ]

        /// Whether the guides define this code.
        public var isDefined: Bool { Status.allDefined.contains(self) }

        /// The guides' description of the code, or "undefined status" for others.
        public var meaning: String {
            switch rawValue {
            case 0: "no errors encountered"
            case 1: "processing error"
            case 2: "missing device token"
            case 3: "missing topic"
            case 4: "missing payload"
            case 5: "invalid token size"
            case 6: "invalid topic size"
            case 7: "invalid payload size"
            case 8: "invalid token"
            case 10: "shutdown"
            case 128: "protocol error"
            case 255: "none (unknown)"
            default: "undefined status"
            }
        }

        public var description: String { "\(rawValue) (\(meaning))" }
    }
}
