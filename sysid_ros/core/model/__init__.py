"""The robot as data: static trees and parameter pytrees (`types`), spatial algebra
(`spatial`), inertia and DiffNEA's virtual parameters (`inertia`), the `ParameterSpec` of what
is identified (`parameters`), and builders of the papers' canonical systems (`builders`)."""
