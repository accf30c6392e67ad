import ArgumentParser
import Foundation
import CampaignTLS

/// `campaign token`: a provider authentication token (ES256 JWT) from a `.p8` key.
struct Token: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print a provider authentication token (ES256 JWT) signed with a .p8 key, for curl, h2load or a check of the key.",
        discussion: """
        The token is what `send --auth-key` sends as `authorization: bearer …`. \
        APNs accepts a token for an hour and a new one at most every 20 minutes \
        per connection. It is a credential: it goes to standard output only.
        """
    )

    @Option(help: ArgumentHelp("The key, as Apple issues it (AuthKey_<KEY ID>.p8: PKCS#8 PEM, P-256).", valueName: "file"))
    var authKey: String

    @Option(help: ArgumentHelp("The key's 10-character id.", valueName: "KID"))
    var keyId: String

    @Option(help: ArgumentHelp("Your 10-character team id.", valueName: "TEAM"))
    var teamId: String

    @Option(help: ArgumentHelp("Issued at (UNIX seconds; default now).", valueName: "s"))
    var issuedAt: Int64?

    func validate() throws {
        for (name, value) in [("--key-id", keyId), ("--team-id", teamId)]
        where value.count != 10 || !value.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) }) {
            throw ValidationError("\(name) must be 10 letters or digits, as Apple's are, not \"\(value)\".")
        }
    }

    func run() throws {
        try reportingErrors(as: "token") {
            let key = try PrivateKey.load(pemFile: authKey, passphrase: nil)
            let token = try ProviderToken(keyID: keyId, teamID: teamId, issuedAt: issuedAt ?? Int64(Date().timeIntervalSince1970), key: key)
            print(token.text)
        }
    }
}
