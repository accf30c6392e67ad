import Foundation
import CampaignIO
import CampaignTLS

/// Debian's tinyproxy on 127.0.0.1, with a configuration the test writes
/// (Basic authentication when `user` is given), in the foreground of a
/// process the test owns: stopped by ``stop()`` or when released.
public final class TinyProxy: @unchecked Sendable {
    public let port: Int
    public let directory: String
    private let connectPorts: [Int]?
    private var process: Process?
    private let user: (name: String, password: String)?

    /// Starts tinyproxy on a free port (or `port`, to come back where it was) and waits, bounded, until it accepts connections.
    /// `connectPorts`: the only ports it opens tunnels to (others: 403); nil: any.
    public init(in dir: TemporaryDirectory, name: String = "proxy", user: (String, String)? = nil, port: Int? = nil,
                connectPorts: [Int]? = nil) throws {
        self.connectPorts = connectPorts
        directory = dir.file(name)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        self.user = user.map { (name: $0.0, password: $0.1) }
        self.port = try port ?? Self.freePort()
        try start()
    }

    deinit { stop() }

    /// Starts it again after ``stop()`` (a proxy that comes back), on the same port.
    public func start() throws {
        var config = """
        Port \(port)
        Listen 127.0.0.1
        Timeout 60
        MaxClients 200
        Allow 127.0.0.1
        LogLevel Connect
        LogFile "\(directory)/tinyproxy.log"

        """
        if let user { config += "BasicAuth \(user.name) \(user.password)\n" }
        for p in connectPorts ?? [] { config += "ConnectPort \(p)\n" }
        try config.write(toFile: "\(directory)/tinyproxy.conf", atomically: true, encoding: .utf8)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/tinyproxy")
        p.arguments = ["-d", "-c", "\(directory)/tinyproxy.conf"]
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        process = p
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if (try? Socket.connect(host: "127.0.0.1", port: port, deadline: .after(seconds: 1))) != nil { return }
            usleep(20_000)
        }
        stop()
        throw CocoaError(.featureUnsupported, userInfo: [NSLocalizedDescriptionKey: "tinyproxy did not listen on \(port) within 10 s"])
    }

    /// Ends it (SIGKILL: a proxy that dies, its tunnels with it) and waits for it.
    public func stop() {
        guard let p = process else { return }
        process = nil
        if p.isRunning { kill(p.processIdentifier, SIGKILL) }
        p.waitUntilExit()
    }

    /// `http://127.0.0.1:PORT`, with `user:password@` when asked.
    public func url(credentials: String? = nil) -> String {
        "http://\(credentials.map { "\($0)@" } ?? "")127.0.0.1:\(port)"
    }

    /// CONNECT requests the proxy logged (each a tunnel it opened or refused).
    public var connectsLogged: Int {
        let log = (try? String(contentsOfFile: "\(directory)/tinyproxy.log", encoding: .utf8)) ?? ""
        return log.components(separatedBy: "Request (file descriptor").count - 1
    }

    /// A port nothing listens on now (the kernel's choice for a socket bound to port 0).
    static func freePort() throws -> Int {
        let listener = try Listener(port: 0)
        defer { listener.close() }
        return listener.port
    }
}
