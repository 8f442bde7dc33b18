"""The robot as data: static trees and parameter pytrees (`types`), spatial algebra
(`spatial`, and `blocks` for batched 3x3 blocks), inertia and DiffNEA's virtual parameters
(`inertia`), the `ParameterSpec` of what is identified (`parameters`), builders of the papers'
canonical systems (`builders`) and edits of `Params` (`edits`)."""
