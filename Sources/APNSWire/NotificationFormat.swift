/// The three notification formats of the APNs binary interface, named by the
/// command byte that starts each packet.
///
/// The guides differ on limits: the 2011 guide allows a 256-byte payload and a
/// 32-byte token for commands 0 and 1; the later binary provider API (command 2)
/// allows tokens of up to 100 bytes and payloads of up to 2 kilobytes. Each
/// format keeps the limits of the guide that defines it.
public enum NotificationFormat: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    /// Command 0: token and payload only. The gateway answers errors by closing
    /// the connection without saying why.
    case simple = 0
    /// Command 1: adds a 4-byte identifier and a 4-byte expiry; errors are
    /// answered with an error-response packet naming the identifier.
    case enhanced = 1
    /// Command 2: a frame of items (token, payload, identifier, expiry, priority).
    case frame = 2

    /// The command byte that starts a packet in this format.
    public var command: UInt8 { rawValue }

    /// The largest payload, in bytes, the gateway accepts in this format.
    public var maxPayloadBytes: Int {
        switch self {
        case .simple, .enhanced: 256
        case .frame: 2048
        }
    }

    /// The largest device token, in bytes. Commands 0 and 1 take exactly 32.
    public var maxTokenBytes: Int { self == .frame ? 100 : 32 }

    /// Whether the gateway reports errors with an error-response packet.
    public var reportsErrors: Bool { self != .simple }

    /// Parses the names used in job files and on the command line.
    public init?(name: String) {
        switch name.lowercased() {
        case "simple": self = .simple
        case "enhanced": self = .enhanced
        case "frame": self = .frame
        default: return nil
        }
    }

    public var description: String {
        switch self {
        case .simple: "simple"
        case .enhanced: "enhanced"
        case .frame: "frame"
        }
    }
}

/// The priority item of a frame (item 5).
public struct NotificationPriority: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// 10: send immediately. The notification must alert, sound or badge.
    public static let immediate = NotificationPriority(rawValue: 10)
    /// 5: send at a time that conserves power on the device.
    public static let conservePower = NotificationPriority(rawValue: 5)
    /// 1 (HTTP/2 only): lowest; may be delivered together with others later.
    public static let lowest = NotificationPriority(rawValue: 1)

    /// Whether the binary provider API defines this value.
    public var isDefined: Bool { self == .immediate || self == .conservePower }

    public var description: String { String(rawValue) }
}
