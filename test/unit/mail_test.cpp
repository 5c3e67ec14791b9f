#include "core/idna.hpp"
#include "core/mail.hpp"
#include "mail_decode.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace mail = hpcacct::mail;

namespace {

using mail_decode::lines;
using mail_decode::valid_utf8;

std::string qp_decode(const std::string &s) {
    mail_decode::Decoded d = mail_decode::qp(s);
    EXPECT_EQ(d.why, "") << s;
    return d.text;
}

std::string words_decode(const std::string &s, std::size_t column, bool utf8) {
    mail_decode::Decoded d = mail_decode::words(s, column, utf8);
    EXPECT_EQ(d.why, "") << s;
    return d.text;
}

}  // namespace

TEST(MailBody, ShortUtf8LinesGoAsTheyAre) {
    mail::Body b = mail::encode_body("Grüße,\n.a dot first\n\ttab inside\n");
    EXPECT_EQ(b.encoding, "8bit");
    EXPECT_EQ(b.text, "Grüße,\r\n.a dot first\r\n\ttab inside\r\n");
    EXPECT_EQ(mail::encode_body("plain\n").encoding, "7bit");
    EXPECT_EQ(mail::encode_body("").encoding, "7bit");
}

TEST(MailBody, WhatCannotGoAsItIsIsQuotedPrintable) {
    for (std::string s : {std::string(999, 'x') + "\n", std::string("trailing \n"), std::string("tab\t\n"),
                          std::string("lone\rCR\n"), std::string("CRLF\r\n"), std::string("no final LF"),
                          std::string("\x01\n"), std::string("bad \xC3\x28 UTF-8\n"), std::string("del\x7f\n"),
                          std::string("a\nFrom here\n")})
        EXPECT_EQ(mail::encode_body(s).encoding, "quoted-printable") << s;
    EXPECT_EQ(mail::encode_body(std::string(998, 'x') + "\n").encoding, "7bit");
    EXPECT_EQ(mail::encode_body("a From here\nFrom\n").encoding, "7bit");
    EXPECT_EQ(mail::encode_body(std::string(3, '\xC3') + "\n").encoding, "quoted-printable");  // not UTF-8
}

TEST(MailBody, QuotedPrintableKeepsEveryByte) {
    const std::string text = std::string(2000, 'x') + "\n" + [] {
        std::string e;
        for (int i = 0; i < 700; ++i) e += "é";
        return e;
    }() + "\n.\n..two\nFrom here\n= =3D =?UTF-8?B?SGk=?=\ntrailing   \ntab\t\n \nlone\rCR\nCRLF\r\nend\n\n\xF0\x9D\x84\x9E end  ";
    std::string q = mail::quoted_printable(text);
    EXPECT_EQ(qp_decode(q), text);
    for (const std::string &l : lines(q)) {
        EXPECT_LE(l.size(), 76u) << l;
        EXPECT_TRUE(l.empty() || (l.back() != ' ' && l.back() != '\t')) << l;
        EXPECT_NE(l.substr(0, 1), ".") << l;
        EXPECT_NE(l.substr(0, 5), "From ") << l;
    }
    EXPECT_EQ(q.substr(q.size() - 3), "=\r\n");  // no final LF: a soft break
    EXPECT_EQ(mail::quoted_printable(""), "");
    EXPECT_EQ(mail::quoted_printable("a b\n"), "a b\r\n");
    EXPECT_EQ(mail::quoted_printable("a \n"), "a=20\r\n");
    EXPECT_EQ(mail::quoted_printable("\r\n"), "=0D\r\n");
}

TEST(MailBody, QuotedPrintableSplitsNoCharacterWhereItFits) {
    std::string text;
    for (int i = 0; i < 100; ++i) text += "ab\xE2\x82\xAC";  // a, b, euro sign
    std::string q = mail::quoted_printable(text + "\n");
    for (const std::string &l : lines(q)) {
        std::string d = qp_decode(l + "\r\n");
        EXPECT_TRUE(valid_utf8(d)) << l;
    }
}

TEST(MailBody, RandomTextsRoundTrip) {
    std::mt19937 rng(42);
    const std::vector<std::string> pieces = {"a", " ", "\t", "\n", "\r", ".", "=", "From ", "é", "\xF0\x9D\x84\x9E",
                                             "\xFF", "\xC3", std::string(1, '\0'), "?=", "xxxxxxxxxxxxxxxxxxxxxxxxx"};
    for (int round = 0; round < 2000; ++round) {
        std::string text;
        int n = static_cast<int>(rng() % 200);
        for (int i = 0; i < n; ++i) text += pieces[rng() % pieces.size()];
        mail::Body b = mail::encode_body(text);
        for (const std::string &l : lines(b.text)) ASSERT_LE(l.size(), mail::kLine);
        if (b.encoding == "quoted-printable") ASSERT_EQ(qp_decode(b.text), text);
        else {
            std::string back = b.text;
            for (std::size_t p; (p = back.find("\r\n")) != std::string::npos;) back.replace(p, 2, "\n");
            ASSERT_EQ(back, text);
        }
        std::string w = mail::encoded_words(text, 9, round % 2 == 0);
        ASSERT_EQ(words_decode(w, 9, valid_utf8(text)), text);
    }
}

TEST(MailHeader, ShortAsciiStaysAsItIs) {
    EXPECT_EQ(mail::unstructured("[hpcacct] p02 on ada: hours retracted (2024-03-15)", 9),
              "[hpcacct] p02 on ada: hours retracted (2024-03-15)");
    EXPECT_EQ(mail::unstructured("", 9), "");
    EXPECT_EQ(mail::mailbox("Ann \"the\" O\\Neil", "ann@x.example", 4), "\"Ann \\\"the\\\" O\\\\Neil\" <ann@x.example>");
    EXPECT_EQ(mail::mailbox("", "ann@x.example", 4), "<ann@x.example>");
}

TEST(MailHeader, WhatCouldBeMisreadIsEncoded) {
    for (std::string s : {"=?UTF-8?B?SGk=?= literal", " leading", "trailing ", "tab\there", "Zoë"}) {
        std::string u = mail::unstructured(s, 9);
        EXPECT_EQ(u.compare(0, 8, "=?UTF-8?"), 0) << u;
        EXPECT_EQ(words_decode(u, 9, true), s);
    }
    std::string m = mail::mailbox("=?UTF-8?B?SGk=?=", "a@b.example", 4);
    EXPECT_EQ(m.compare(0, 8, "=?UTF-8?"), 0) << m;
}

// A header name of 59 or 60 characters leaves 18 or 19 on its line: a 4-byte character's
// shortest word (B, 20 characters) does not fit, so the words start on the next line (found
// by fuzz mail_fuzz at column 60).
TEST(MailHeader, AFirstWordTooLongForTheFirstLineStartsOnTheNext) {
    const std::string clef = "\xF0\x9D\x84\x9E";
    for (std::size_t column : {58u, 59u, 60u}) {
        for (const std::string &text : {clef, clef + " Zo\xC3\xAB", std::string("\xF0") + clef}) {
            const std::string w = mail::encoded_words(text, column, true);
            const std::vector<std::string> ls = lines(w);
            ASSERT_FALSE(ls.empty());
            EXPECT_LE(ls[0].size() + column, mail::kHeaderLine) << column << ": " << w;
            for (std::size_t i = 1; i < ls.size(); ++i) EXPECT_LE(ls[i].size(), mail::kHeaderLine) << w;
            EXPECT_EQ(words_decode(w, column, valid_utf8(text)), text) << column << ": " << w;
        }
    }
}

TEST(MailHeader, LongSubjectsFoldIntoWordsOfWholeCharacters) {
    std::string ascii, utf8;
    for (int i = 0; i < 30; ++i) ascii += "word ";
    ascii += std::string(150, 'A');
    for (int i = 0; i < 8; ++i) utf8 += "Dépassement de quota — ž \xF0\x9D\x84\x9E ";
    for (const std::string &s : {ascii, utf8}) {
        std::string u = mail::unstructured(s, 9);
        EXPECT_GT(lines(u).size(), 2u);
        EXPECT_EQ(words_decode(u, 9, true), s);
    }
    EXPECT_NE(mail::unstructured(ascii, 9).find("?Q?word_word_"), std::string::npos);  // ASCII stays readable
}

TEST(MailHeader, LongDisplayNamesFoldAndTheAddressFollows) {
    std::string name;
    for (int i = 0; i < 6; ++i) name += "Zoë Łukasiewicz-Ünal \xF0\x9D\x84\x9E ";
    const std::string addr = "someone.with.a.long.address@laboratory.example";
    std::string m = mail::mailbox(name, addr, 4);
    std::size_t lt = m.rfind(" <");
    ASSERT_NE(lt, std::string::npos);
    EXPECT_EQ(m.substr(lt + 1), "<" + addr + ">");
    std::string words = m.substr(0, lt);
    if (words.size() >= 2 && words.compare(words.size() - 2, 2, "\r\n") == 0) words.resize(words.size() - 2);
    EXPECT_EQ(words_decode(words, 4, true), name);
    std::vector<std::string> ls = lines(m);
    for (std::size_t i = 0; i < ls.size(); ++i) EXPECT_LE(ls[i].size() + (i == 0 ? 4 : 0), mail::kHeaderLine) << ls[i];
    // a phrase's Q words encode what a display name may not hold
    std::string q = mail::mailbox(std::string(90, 'x') + " \"q\", <i>", "a@b.example", 4);
    EXPECT_EQ(q.find('"'), std::string::npos) << q;
    EXPECT_EQ(q.find(','), std::string::npos) << q;
}

TEST(MailMessage, HeaderAndBody) {
    mail::Message m{"hpc@centre.example", "Zoë Ünal", "u1@lab.example", "[hpcacct] test", "Thu, 15 Feb 2024 00:00:00 +0000",
                    "<hpcacct.1.2@centre.example>", "1", "line\n"};
    std::string s = mail::compose(m);
    EXPECT_NE(s.find("\r\nTo: =?UTF-8?B?Wm/DqyDDnG5hbA==?= <u1@lab.example>\r\n"), std::string::npos) << s;
    EXPECT_NE(s.find("\r\nSubject: [hpcacct] test\r\n"), std::string::npos);
    EXPECT_NE(s.find("\r\nContent-Transfer-Encoding: 7bit\r\n"), std::string::npos);
    EXPECT_EQ(s.substr(s.size() - 10), "\r\n\r\nline\r\n");
    m.body = "";
    s = mail::compose(m);
    EXPECT_EQ(s.substr(s.size() - 4), "\r\n\r\n");
}

namespace {
// a stand-in for libidn2: one known domain, anything else has no A-label
bool fake_to_ascii(const std::string &domain, std::string &a_label, std::string &why) {
    if (domain == "université.example") {
        a_label = "xn--universit-j4a.example";
        return true;
    }
    why = "disallowed code point";
    return false;
}
}  // namespace

TEST(MailEnvelope, AsciiGoesAsItIs) {
    mail::Envelope e = mail::envelope("o'neil+x@lab.example", fake_to_ascii);
    EXPECT_EQ(e.address, "o'neil+x@lab.example");
    EXPECT_FALSE(e.needs_smtputf8);
    EXPECT_EQ(e.error, "");
}

TEST(MailEnvelope, AnInternationalizedDomainGoesAsItsALabel) {
    mail::Envelope e = mail::envelope("zoe@université.example", fake_to_ascii);
    EXPECT_EQ(e.address, "zoe@xn--universit-j4a.example");
    EXPECT_FALSE(e.needs_smtputf8);
    e = mail::envelope("zoë@université.example", fake_to_ascii);
    EXPECT_EQ(e.address, "zoë@xn--universit-j4a.example");
    EXPECT_TRUE(e.needs_smtputf8);
}

TEST(MailEnvelope, ANonAsciiLocalPartNeedsSmtputf8) {
    mail::Envelope e = mail::envelope("zoë@lab.example", fake_to_ascii);
    EXPECT_EQ(e.address, "zoë@lab.example");
    EXPECT_TRUE(e.needs_smtputf8);
}

TEST(MailEnvelope, WhatCannotBeSentSaysWhy) {
    mail::Envelope e = mail::envelope("a@☃.example", fake_to_ascii);
    EXPECT_EQ(e.address, "");
    EXPECT_NE(e.error.find("has no IDNA A-label (disallowed code point)"), std::string::npos) << e.error;
    // a converter that claims success with no or a non-ASCII result is not believed
    auto liar = [](const std::string &, std::string &a, std::string &) { a = "ü.example"; return true; };
    EXPECT_EQ(mail::envelope("a@ü.example", liar).address, "");
    for (const char *bad : {"no-at-sign", "@lab.example", "a@", "a b@lab.example", "a@lab.example>\r\nBcc: x@y",
                            "a@lab.example,b@lab.example", "\"a\"@lab.example"}) {
        e = mail::envelope(bad, fake_to_ascii);
        EXPECT_EQ(e.address, "") << bad;
        EXPECT_NE(e.error.find("is not an address SMTP can carry"), std::string::npos) << bad;
    }
}

// IDNA's UTS #46 mapping (libidn2 with IDN2_NONTRANSITIONAL) turns fullwidth punctuation into
// ASCII: an A-label with anything but letters, digits, hyphens and dots is not believed
TEST(MailEnvelope, AnALabelIsOnlyLettersDigitsHyphensAndDots) {
    auto mapping = [](const std::string &domain, std::string &a, std::string &) {
        if (domain == "x\uFF1E\uFF0C\uFF1Cv\uFF20evil.example") a = "x>,<v@evil.example";
        else if (domain == "a\uFF02b.example") a = "a\"b.example";
        else if (domain == "a\uFF3Fb.example") a = "a_b.example";
        else a = "xn--ok-9ja.example";
        return true;
    };
    for (const char *bad : {"z@x\uFF1E\uFF0C\uFF1Cv\uFF20evil.example", "z@a\uFF02b.example", "z@a\uFF3Fb.example"}) {
        mail::Envelope e = mail::envelope(bad, mapping);
        EXPECT_EQ(e.address, "") << bad;
        EXPECT_NE(e.error.find("has no IDNA A-label"), std::string::npos) << e.error;
    }
    EXPECT_EQ(mail::envelope("z@ok\u00E9.example", mapping).address, "z@xn--ok-9ja.example");
}

TEST(MailEnvelope, TheToHeaderCarriesTheConvertedAddress) {
    mail::Message m;
    m.from = "hpc@centre.example";
    m.to_address = mail::envelope("zoe@université.example", fake_to_ascii).address;
    m.subject = "s";
    std::string msg = mail::compose(m);
    EXPECT_NE(msg.find("\r\nTo: <zoe@xn--universit-j4a.example>\r\n"), std::string::npos) << msg;
}

TEST(MailSmtpTrace, Smtputf8IsOfferedByTheLastEhloAndCarriedByMailFrom) {
    mail::SmtpTrace t;
    t.line(true, "EHLO centre.example\r\n");
    for (const char *l : {"250-localhost\r\n", "250-8BITMIME\r\n", "250-SMTPUTF8\r\n", "250 HELP\r\n"}) t.line(false, l);
    EXPECT_TRUE(t.smtputf8_offered);
    t.line(true, "MAIL FROM:<hpc@centre.example> SMTPUTF8\r\n");
    EXPECT_TRUE(t.mail_smtputf8);
    t.line(true, "MAIL FROM:<hpc@centre.example>\r\n");
    EXPECT_FALSE(t.mail_smtputf8);
    // a new connection's EHLO (after STARTTLS too) says it again
    t.line(true, "EHLO centre.example\r\n");
    EXPECT_FALSE(t.smtputf8_offered);
    for (const char *l : {"250-localhost", "250-SMTPUTF8X", "250-X-SMTPUTF8", "250 SIZE 1000"}) t.line(false, l);
    EXPECT_FALSE(t.smtputf8_offered);
    t.line(false, "250 smtputf8");
    EXPECT_TRUE(t.smtputf8_offered);
    // another command's answer is no offer, and a reused connection keeps what its EHLO said
    t.line(true, "NOOP\r\n");
    t.line(false, "250 OK\r\n");
    EXPECT_TRUE(t.smtputf8_offered);
}

// One mailbox, one key: the domain as its A-label and in lower case, the local part as written.
TEST(MailboxKey, TheDomainAsItsALabelInLowerCase) {
    EXPECT_EQ(mail::mailbox_key("zoe@université.example", fake_to_ascii), "zoe@xn--universit-j4a.example");
    EXPECT_EQ(mail::mailbox_key("zoe@xn--universit-j4a.example", fake_to_ascii), "zoe@xn--universit-j4a.example");
    EXPECT_EQ(mail::mailbox_key("zoe@XN--Universit-J4A.Example", fake_to_ascii), "zoe@xn--universit-j4a.example");
    EXPECT_EQ(mail::mailbox_key("Zoe.Smith@Lab.EXAMPLE", fake_to_ascii), "Zoe.Smith@lab.example");
    EXPECT_NE(mail::mailbox_key("Zoe@lab.example", fake_to_ascii), mail::mailbox_key("zoe@lab.example", fake_to_ascii));
    // the last @ separates them; a domain with no A-label stays, in lower case; no @: as it is
    EXPECT_EQ(mail::mailbox_key("a@b@LAB.example", fake_to_ascii), "a@b@lab.example");
    EXPECT_EQ(mail::mailbox_key("a@☃.EXAMPLE", fake_to_ascii), "a@☃.example");
    EXPECT_EQ(mail::mailbox_key("nobody", fake_to_ascii), "nobody");
}

// With libidn2 itself, as the sender and the database use it: UTS #46 maps upper case.
TEST(MailboxKey, WithLibidn2) {
    EXPECT_EQ(mail::mailbox_key("x@bücher.example", mail::idna_to_ascii), "x@xn--bcher-kva.example");
    EXPECT_EQ(mail::mailbox_key("x@BÜCHER.Example", mail::idna_to_ascii), "x@xn--bcher-kva.example");
    EXPECT_EQ(mail::mailbox_key("x@XN--BCHER-KVA.example", mail::idna_to_ascii), "x@xn--bcher-kva.example");
    EXPECT_EQ(mail::mailbox_key("Ünal@bücher.example", mail::idna_to_ascii), "Ünal@xn--bcher-kva.example");
    // non-transitional: ß is a letter of its own, not "ss"
    EXPECT_NE(mail::mailbox_key("x@straße.example", mail::idna_to_ascii), "x@strasse.example");
    // fullwidth letters map to ASCII ones: the sender sends to that domain, so it is that mailbox
    EXPECT_EQ(mail::mailbox_key("x@ｅｘａｍｐｌｅ.org", mail::idna_to_ascii), "x@example.org");
    // fullwidth punctuation maps to '>', ',', '<', '@': envelope() refuses it, the key is the address
    EXPECT_EQ(mail::mailbox_key("z@x＞，＜v＠evil.example", mail::idna_to_ascii), "z@x＞，＜v＠evil.example");
}

TEST(MailHostName, LabelsOfLettersDigitsAndHyphens) {
    for (const char *good : {"example.org", "a.b", "xn--universit-j4a.example", "mail-1.lab.example", "localhost",
                             "1.2.3.4.example"})
        EXPECT_TRUE(mail::host_name(good)) << good;
    std::string label63(63, 'a'), label64(64, 'a');
    EXPECT_TRUE(mail::host_name(label63 + ".example"));
    EXPECT_FALSE(mail::host_name(label64 + ".example"));
    std::string long_name;
    while (long_name.size() < 250) long_name += "abcdefghi.";
    long_name += "org";  // 253 characters
    EXPECT_TRUE(mail::host_name(long_name.substr(0, 253))) << long_name.size();
    EXPECT_FALSE(mail::host_name(long_name.substr(0, 250) + "orgx"));
    for (const char *bad : {"", ".", "b..c", ".example", "example.", "-lab.example", "lab-.example", "lab_x.example",
                            "l\u00fcb.example", "lab example", "[192.0.2.1]"})
        EXPECT_FALSE(mail::host_name(bad)) << bad;
}
