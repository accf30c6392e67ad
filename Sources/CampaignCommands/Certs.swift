import ArgumentParser
import Foundation
import CampaignTLS

/// `campaign certs DIR`: development certificates for the simulator and demos.
struct Certs: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write a development CA, a localhost server certificate and an APNs-style client certificate.",
        discussion: """
        Writes ca.pem, ca.key, server.pem, server.key (for localhost and 127.0.0.1), \
        client.pem, client.key (subject UID=<bundle id>, CN=Apple Push Services: <bundle id>) \
        and client.p12. Keys and the bundle are created 0600.
        """
    )

    @Argument(help: "Directory to write into; created when missing.")
    var directory: String

    @Option(help: "Bundle identifier named in the client certificate.")
    var bundleId = "com.example.campaign"

    @Option(help: ArgumentHelp("Environment variable holding the passphrase for client.p12 (default: empty).", valueName: "VAR"))
    var p12PassphraseEnv: String?

    @Option(help: "Days the server and client certificates stay valid.")
    var days = 825

    @Flag(help: "Replace certificates already in the directory (a new CA invalidates every certificate the old one issued).")
    var force = false

    func validate() throws {
        guard days > 0 else { throw ValidationError("--days must be at least 1.") }
        if let name = p12PassphraseEnv, ProcessInfo.processInfo.environment[name] == nil {
            throw ValidationError("The environment variable \(name) named by --p12-passphrase-env is not set.")
        }
    }

    func run() throws {
        let passphrase = p12PassphraseEnv.flatMap { ProcessInfo.processInfo.environment[$0] } ?? ""
        let existing = ["ca.pem", "ca.key", "server.pem", "server.key", "client.pem", "client.key", "client.p12"]
            .filter { FileManager.default.fileExists(atPath: "\(directory)/\($0)") }
        if !force, !existing.isEmpty {
            printError("campaign certs: \(directory) already holds \(existing.joined(separator: ", ")); writing a new CA would invalidate every certificate the old one issued. Give --force to replace them, or another directory.")
            throw CampaignExit.cannotCreate
        }
        try reportingErrors(as: "certs") {
            let written = try DevelopmentCertificates.write(to: directory, bundleID: bundleId, p12Passphrase: passphrase, days: days)
            for path in written { print(path) }
        }
    }
}
