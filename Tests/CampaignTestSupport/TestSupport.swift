import Foundation
import CampaignTLS

/// A directory under the system's temporary directory, removed when released.
public final class TemporaryDirectory: @unchecked Sendable {
    public let path: String

    public init(_ label: String = "campaign-test") {
        let base = FileManager.default.temporaryDirectory.path
        path = "\(base)/\(label)-\(UUID().uuidString)"
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    public func file(_ name: String) -> String { "\(path)/\(name)" }
}

/// One set of development certificates per test process: RSA key generation
/// is the slow part, so tests share them.
public enum TestCertificates {
    private static let shared = TemporaryDirectory("campaign-certs")
    private static let written: Void = {
        try! DevelopmentCertificates.write(to: shared.path, bundleID: "com.example.campaign", p12Passphrase: "s3cret")
    }()

    /// A directory holding ca.pem, server.pem, server.key, client.pem, client.key and client.p12 (passphrase "s3cret").
    public static var directory: String {
        _ = written
        return shared.path
    }

    public static func path(_ name: String) -> String { "\(directory)/\(name)" }

    /// A client context that presents the development client certificate and trusts the development CA.
    public static func clientContext() throws -> TLSContext {
        let identity = try TLSIdentity.pem(certificate: path("client.pem"), key: path("client.key"), passphrase: nil)
        return try TLSContext.client(identity: identity, trust: .file(path("ca.pem")))
    }
}

/// Runs `body` on a new thread and lets the caller wait for it to finish.
public final class BackgroundTask<T: Sendable>: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private var result: Result<T, any Error>?

    public init(_ body: @escaping @Sendable () throws -> T) {
        let thread = Thread { [self] in
            result = Result { try body() }
            done.signal()
        }
        thread.start()
    }

    /// Waits for the body; fails the wait after `timeout` seconds (a backstop against a hang, not a speed bound).
    public func value(timeout: Double = 120) throws -> T {
        guard done.wait(timeout: .now() + timeout) == .success else { throw TimedOut() }
        done.signal()
        return try result!.get()
    }

    public struct TimedOut: Error {}
}

/// Hands a value to another thread that alone uses it from then on.
public final class UncheckedBox<T>: @unchecked Sendable {
    public let value: T
    public init(_ value: T) { self.value = value }
}
