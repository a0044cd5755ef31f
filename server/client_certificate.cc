// The subject CN of a client certificate, with OpenSSL.
#include "server/client_certificate.h"

#include <openssl/bio.h>
#include <openssl/objects.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>

namespace kvserve::server {

absl::StatusOr<std::string> SubjectCommonName(std::string_view pem) {
  const std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
  if (bio == nullptr) return absl::UnauthenticatedError("the client certificate cannot be read");
  const std::unique_ptr<X509, decltype(&X509_free)> cert(
      PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr), &X509_free);
  if (cert == nullptr) {
    return absl::UnauthenticatedError("the client certificate is not a PEM certificate");
  }
  const X509_NAME* subject = X509_get_subject_name(cert.get());
  const int first = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  if (first < 0) {
    return absl::UnauthenticatedError(
        "the client certificate's subject has no CN to name the tenant");
  }
  if (X509_NAME_get_index_by_NID(subject, NID_commonName, first) >= 0) {
    return absl::UnauthenticatedError(
        "the client certificate's subject has more than one CN: one must name the tenant");
  }
  const ASN1_STRING* value = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, first));
  return std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(value)),
                     static_cast<size_t>(ASN1_STRING_length(value)));
}

}  // namespace kvserve::server
