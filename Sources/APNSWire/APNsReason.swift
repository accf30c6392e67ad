/// The `reason` of an HTTP/2 APNs answer (`{"reason":"BadDeviceToken"}`):
/// Apple's table (`../shared/reference/apns-http2.md`, "Response") as cases,
/// and anything else a server says as ``unknown(_:)``, so that code matches
/// reasons as values and a misspelt one fails to compile.
public enum APNsReason: Hashable, Sendable, CustomStringConvertible, ExpressibleByStringLiteral {
    // 400
    case badCollapseId, badDeviceToken, badExpirationDate, badMessageId, badPriority, badTopic
    case deviceTokenNotForTopic, duplicateHeaders, idleTimeout, invalidPushType, missingDeviceToken
    case missingTopic, payloadEmpty, topicDisallowed
    // 400, channel management and broadcast (`apns-broadcast.md` §3)
    case featureNotEnabled, missingChannelId, badChannelId, channelNotRegistered, badRequestParams
    case badRequestPayload, missingPushType, cannotCreateChannelConfig
    // 403
    case badCertificate, badCertificateEnvironment, expiredProviderToken, forbidden
    case invalidProviderToken, missingProviderToken, topicMismatch
    // 404, 405
    case badPath, methodNotAllowed
    // 410
    case unregistered, expiredToken
    // 413
    case payloadTooLarge
    // 429
    case tooManyProviderTokenUpdates, tooManyRequests
    // 500, 503
    case internalServerError, serviceUnavailable, shutdown
    /// A reason not in Apple's table, as the server gave it.
    case unknown(String)

    /// Every reason Apple documents.
    public static let documented: [APNsReason] = [
        .badCollapseId, .badDeviceToken, .badExpirationDate, .badMessageId, .badPriority, .badTopic,
        .deviceTokenNotForTopic, .duplicateHeaders, .idleTimeout, .invalidPushType, .missingDeviceToken,
        .missingTopic, .payloadEmpty, .topicDisallowed,
        .featureNotEnabled, .missingChannelId, .badChannelId, .channelNotRegistered, .badRequestParams,
        .badRequestPayload, .missingPushType, .cannotCreateChannelConfig, .topicMismatch,
        .badCertificate, .badCertificateEnvironment, .expiredProviderToken, .forbidden,
        .invalidProviderToken, .missingProviderToken,
        .badPath, .methodNotAllowed, .unregistered, .expiredToken, .payloadTooLarge,
        .tooManyProviderTokenUpdates, .tooManyRequests, .internalServerError, .serviceUnavailable, .shutdown,
    ]

    private static let byName: [String: APNsReason] = Dictionary(uniqueKeysWithValues: documented.map { ($0.name, $0) })

    /// The reason a server wrote: one of Apple's, or ``unknown(_:)``. Apple
    /// spaces some names in some tables (the broadcast error list spells
    /// 503's "Service Unavailable" where the device-push list has
    /// "ServiceUnavailable"): a name is also looked up without its spaces.
    public init(name: String) {
        if let known = Self.byName[name] { self = known; return }
        if name.utf8.contains(0x20), name.utf8.count <= 128, let known = Self.byName[String(name.filter { $0 != " " })] { self = known; return }
        self = .unknown(name)
    }

    public init(stringLiteral name: String) {
        self.init(name: name)
    }

    /// The name as it travels on the wire.
    public var name: String {
        switch self {
        case .badCollapseId: "BadCollapseId"
        case .badDeviceToken: "BadDeviceToken"
        case .badExpirationDate: "BadExpirationDate"
        case .badMessageId: "BadMessageId"
        case .badPriority: "BadPriority"
        case .badTopic: "BadTopic"
        case .deviceTokenNotForTopic: "DeviceTokenNotForTopic"
        case .duplicateHeaders: "DuplicateHeaders"
        case .idleTimeout: "IdleTimeout"
        case .invalidPushType: "InvalidPushType"
        case .missingDeviceToken: "MissingDeviceToken"
        case .missingTopic: "MissingTopic"
        case .payloadEmpty: "PayloadEmpty"
        case .topicDisallowed: "TopicDisallowed"
        case .featureNotEnabled: "FeatureNotEnabled"
        case .missingChannelId: "MissingChannelId"
        case .badChannelId: "BadChannelId"
        case .channelNotRegistered: "ChannelNotRegistered"
        case .badRequestParams: "BadRequestParams"
        case .badRequestPayload: "BadRequestPayload"
        case .missingPushType: "MissingPushType"
        case .cannotCreateChannelConfig: "CannotCreateChannelConfig"
        case .topicMismatch: "TopicMismatch"
        case .badCertificate: "BadCertificate"
        case .badCertificateEnvironment: "BadCertificateEnvironment"
        case .expiredProviderToken: "ExpiredProviderToken"
        case .forbidden: "Forbidden"
        case .invalidProviderToken: "InvalidProviderToken"
        case .missingProviderToken: "MissingProviderToken"
        case .badPath: "BadPath"
        case .methodNotAllowed: "MethodNotAllowed"
        case .unregistered: "Unregistered"
        case .expiredToken: "ExpiredToken"
        case .payloadTooLarge: "PayloadTooLarge"
        case .tooManyProviderTokenUpdates: "TooManyProviderTokenUpdates"
        case .tooManyRequests: "TooManyRequests"
        case .internalServerError: "InternalServerError"
        case .serviceUnavailable: "ServiceUnavailable"
        case .shutdown: "Shutdown"
        case .unknown(let name): name
        }
    }

    public var description: String { name }
}
